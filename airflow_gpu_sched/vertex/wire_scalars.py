"""The scalar types of the Vertex AI v1 wire (see ``shared/vertex-api.md``): durations read
from ``"1800s"``, a number of seconds, a ``timedelta`` or shorthand such as ``"2h"``/``"1h30m"``
and written as ``"1800s"``; int64 fields read from strings or numbers and written as strings;
timestamps written as RFC 3339 in UTC. The pydantic models (:mod:`models`) annotate their
fields with these.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|ms|m|s)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


# google/protobuf/duration.proto: "Signed seconds of the span of time. Must be from -315,576,000,000
# to +315,576,000,000 inclusive" (10,000 years): the one bound of every Duration field, for the
# operators' arguments and the emulator's requests alike (strict_json checks the wire form with it).
MAX_DURATION_SECONDS = 315_576_000_000


def duration_out_of_range(seconds: float) -> str | None:
    """Why ``seconds`` is no google.protobuf.Duration (not finite, or past +-10,000 years), or None."""
    if not math.isfinite(seconds) or abs(seconds) > MAX_DURATION_SECONDS:
        return (f"is out of range: a duration is at most {MAX_DURATION_SECONDS:,} seconds either way "
                "(google.protobuf.Duration, 10,000 years)")
    return None


def _in_range(seconds: float, value: Any) -> timedelta:
    problem = duration_out_of_range(seconds)
    if problem:
        shown = "an integer of more than 64 bits" if isinstance(value, int) and value.bit_length() > 64 else \
            repr(str(value)[:60])
        raise ValueError(f"{shown} {problem}")
    return timedelta(seconds=seconds)


def parse_duration(value: Any) -> timedelta:
    """Read a duration from ``timedelta``, seconds, ``"1800s"``, ``"3.5s"`` or ``"1h30m"``; a
    ValueError (never an OverflowError) past :data:`MAX_DURATION_SECONDS` or not finite."""
    if isinstance(value, timedelta):
        return _in_range(value.total_seconds(), value)
    if isinstance(value, bool):
        raise ValueError("a duration cannot be a boolean")
    if isinstance(value, (int, float)):
        return _in_range(float(value) if abs(value) <= MAX_DURATION_SECONDS else math.inf, value)
    if isinstance(value, str):
        text = value.strip().lower()
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-")
        try:
            return _in_range(sign * float(body), value)
        except ValueError as exc:
            if "out of range" in str(exc):
                raise
        parts = _DURATION_PART.findall(body)
        if parts and "".join(n + u for n, u in parts) == body:
            return _in_range(sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts), value)
    raise ValueError(
        f"{value!r} is not a duration: use seconds (1800), '1800s', '30m', '2h', '1d' or a timedelta"
    )


def format_duration(value: timedelta) -> str:
    """Write a duration the way the API does: ``"1800s"``, ``"3.5s"``."""
    seconds = value.total_seconds()
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:.9f}".rstrip("0") + "s"


def _parse_int64(value: Any) -> Any:
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return value


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, microseconds when present (as Google writes them)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    text = value.astimezone(timezone.utc).isoformat()
    return text.replace("+00:00", "Z")


Duration = Annotated[
    timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration, when_used="json")
]
Int64 = Annotated[int, BeforeValidator(_parse_int64), PlainSerializer(str, when_used="json")]
Timestamp = Annotated[datetime, PlainSerializer(format_timestamp, when_used="json")]
