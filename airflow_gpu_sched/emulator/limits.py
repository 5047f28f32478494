"""The emulator's limits on what a client sends, in one place (docs/security.md lists each with
its Google counterpart), and the one JSON parser every route uses.

May import: emulator; never airflow.
"""

from __future__ import annotations

import json
import math
from typing import Any

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.clock import MAX_ELAPSED, MAX_SPEED  # noqa: F401 (one place: clock.py)

# Google's API front end refuses a bigger body with 400 "Request payload size exceeds the limit:
# 10485760 bytes." (observed: googleapis/google-cloud-go#9479, Cloud Logging; the same figure for
# Speech, Translation). The emulator refuses it before reading it (Content-Length) or as soon as a
# chunked body passes it.
MAX_BODY_BYTES = 10 * 1024 * 1024
# Far bigger bodies never reach the API: Google's edge answers 413 (an HTML page; docs/security.md).
# Its figure is not public: 32 MiB assumed (Cloud Run's documented HTTP/1 request limit, served by
# the same front end). The emulator answers 413 in the JSON error shape, from Content-Length, unread;
# the connection then drops the rest of the body (emulator/http_limits.py): the client reads the 413.
MAX_FRONT_END_BODY_BYTES = 32 * 1024 * 1024
# protobuf's JSON parser gives up past 100 levels (json_format.Parse(max_recursion_depth=100));
# what Google's front end answers then is assumed: 400 INVALID_ARGUMENT.
MAX_JSON_DEPTH = 100
# The traffic recorder's caps (a body's size, the number of exchanges): emulator/traffic.py.
# Emulated time (no Google counterpart): one clock:advance moves at most 10 years; the clock never
# passes MAX_ELAPSED (1000 years) from its start (datetime ends at 9999); speed in (0, MAX_SPEED].
MAX_ADVANCE_SECONDS = 10 * 365 * 86400.0

# A scenario's durations (queueSeconds, runSeconds, ...) and an injected fault's real latency:
# emulator/scenario.py (MAX_SCENARIO_SECONDS, MAX_FAULT_LATENCY_SECONDS, MAX_SCENARIO_SPEED).


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf: no JSON number is infinite
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def depth_of(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), counted without recursion; stops
    counting once past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


def parse_json(raw: bytes | str) -> Any:
    """A request body as JSON, or ApiError(INVALID_ARGUMENT): malformed, NaN/Infinity, a number
    out of range, deeper than MAX_JSON_DEPTH (never a RecursionError)."""
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        value = None
        too_deep = True
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the hooks, int digits limit
        raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {str(exc)[:200]}") from None
    else:
        too_deep = depth_of(value) > MAX_JSON_DEPTH
    if too_deep:
        raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. Nesting deeper than "
                                           f"{MAX_JSON_DEPTH} levels.")
    return value


def bounded_seconds(value: Any, field: str, limit: float) -> float:
    """A JSON number of seconds: finite, >= 0, <= limit; ApiError naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError("INVALID_ARGUMENT", f"{field} must be a number of seconds (got {type(value).__name__}).")
    if not (0 <= value <= limit and math.isfinite(value)):  # compared first: no int is too large for that
        raise ApiError("INVALID_ARGUMENT", f"{field} must be between 0 and {limit:g} seconds "
                                           f"(got {str(value)[:40]}).")
    return float(value)
