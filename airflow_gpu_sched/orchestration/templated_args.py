"""The operator's scalar arguments a user may template: ``timeout``, ``deadline``,
``expected_run_time``, ``poll_interval`` and ``prices``.

Each is parsed when the DAG file is parsed if it is a literal, and kept as its text if it is a
Jinja template (``"{{ params.deadline }}"``, ``"{{ var.value.gpu_prices }}"``); Airflow renders it
with the other template fields, and :func:`parse` reads the rendered text with the same rules
and the same field-naming errors, before any call to Vertex. A rendered value is one scalar
(a duration, a datetime, a number, a price table): it never reaches the job's structure.

Vertex's models are imported inside the functions only: not loaded at DAG parse.

May import: orchestration, vertex; never airflow.
"""

from __future__ import annotations

import contextlib
import json
import math
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from typing import Any, Callable

TEMPLATED_SCALARS = ("timeout", "deadline", "expected_run_time", "poll_interval", "prices")


def has_template(value: Any) -> bool:
    """A Jinja template (rendered before the task runs), not a value to parse now."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def duration(name: str, value: Any) -> timedelta | None:
    """``timedelta``, seconds, ``"1800s"``, ``"2h"``, ``"1h30m"`` (None stays None)."""
    from airflow_gpu_sched.vertex.wire_scalars import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _invalid(name, str(exc)) from None


def deadline(value: Any) -> datetime | timedelta | None:
    """An absolute datetime (naive: UTC), or a duration after the data interval's end; as text,
    an ISO 8601 datetime or a duration (``"6h"``)."""
    if value is None or isinstance(value, (datetime, timedelta)):
        return value
    if isinstance(value, str) and value.strip():
        try:
            return duration("deadline", value)
        except Exception:  # noqa: BLE001 (not a duration: an ISO datetime, or neither)
            pass
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    raise _invalid("deadline", "must be a datetime or a timedelta after the data interval's end (as text: "
                               f"an ISO 8601 datetime or a duration such as '6h') (got {value!r})")


def poll_interval(value: Any) -> float:
    """Seconds between polls: a finite number > 0 (as text too, once rendered)."""
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise _invalid("poll_interval", f"must be a number of seconds > 0 (got {value!r})")
    return seconds


def prices(value: Any) -> Any:
    """A price table (a dict), ``"catalog"``/``"catalog:<Variable>"``, a Variable's name, or None;
    a rendered table arrives as JSON text and is read back into a dict."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            table = json.loads(value)
        except ValueError as exc:
            raise _invalid("prices", f"a rendered price table must be a JSON object ({exc})") from None
        if not isinstance(table, dict):
            raise _invalid("prices", "a rendered price table must be a JSON object")
        return table
    if value is not None and not isinstance(value, (str, dict)):
        raise _invalid("prices", f"must be a price table (dict), 'catalog' or a Variable's name (got {value!r})")
    return value


PARSERS: dict[str, Callable[[Any], Any]] = {
    "timeout": lambda v: duration("timeout", v),
    "deadline": deadline,
    "expected_run_time": lambda v: duration("expected_run_time", v),
    "poll_interval": poll_interval,
    "prices": prices,
}


def parse(values: dict[str, Any], keep_templates: bool) -> dict[str, Any]:
    """Each argument parsed; with ``keep_templates`` (DAG parse) a template stays its text.
    Every problem is gathered into one :class:`InvalidTrainingSpec` naming each field."""
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    parsed, problems = {}, []
    for name, value in values.items():
        if keep_templates and has_template(value):
            parsed[name] = value
            continue
        try:
            parsed[name] = PARSERS[name](value)
        except InvalidTrainingSpec as exc:
            problems += exc.violations
    if problems:
        raise InvalidTrainingSpec(problems, "arguments")
    return parsed


# What the DAG-parse check of the rest of the job reads in place of a value still a template
# (the value itself is checked once rendered): no timeout, a run time for the budget rule's presence.
STAND_INS: dict[str, Any] = {"timeout": None, "deadline": None, "expected_run_time": timedelta(hours=1),
                             "poll_interval": 30.0, "prices": None}


def templated(values: dict[str, Any]) -> list[str]:
    """The names whose value is still a template (checked once rendered)."""
    return [name for name, value in values.items() if has_template(value)]


def apply(operator: Any, values: dict[str, Any], keep_templates: bool, what: str) -> None:
    """Set each parsed value on the operator; an error names the operator (``what``)."""
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    try:
        parsed = parse(values, keep_templates)
    except InvalidTrainingSpec as exc:
        raise InvalidTrainingSpec(exc.violations, what) from None
    for name, value in parsed.items():
        setattr(operator, name, value)


@contextlib.contextmanager
def standing_in(operator: Any) -> Iterator[None]:
    """While the DAG-parse check of the rest of the job runs: each scalar still a template reads
    its :data:`STAND_INS` value; the template is put back after."""
    names = templated({name: getattr(operator, name) for name in TEMPLATED_SCALARS})
    kept = {name: getattr(operator, name) for name in names}
    try:
        for name in names:
            setattr(operator, name, STAND_INS[name])
        yield
    finally:
        for name, value in kept.items():
            setattr(operator, name, value)


def _invalid(name: str, rule: str) -> Exception:
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
    from airflow_gpu_sched.vertex.rules import Violation

    return InvalidTrainingSpec([Violation(name, rule)])
