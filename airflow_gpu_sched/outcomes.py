"""How a job ended, told apart in one place, and the events triggers send about it.

The triggers (async) and the operators' sync mode both turn a finished job into one of the
closed set of :class:`Event` kinds with :func:`event_for_job`, and the operator validates
what it receives with :func:`validate_event`. :func:`classify_failure` is the one classifier
that tells a preemption/stockout or an expired capacity wait from a failure of the user's
code; it reads the ``google.rpc.ErrorInfo`` reason when the service gives one, else the
message, matched against the phrasings Vertex AI uses (tests hold real-shaped examples).
"""

from __future__ import annotations

import enum
import re
from typing import Any

from airflow_gpu_sched.models import CustomJob, JobState, Status


class Event(str, enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # user code, timeout, anything that is not capacity: never resubmitted
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"  # SPOT: preempted past the service's own restarts (STOCKOUT)
    CAPACITY_TIMEOUT = "capacity_timeout"  # FLEX_START maxWaitDuration, or a busy persistent pool
    QUOTA_EXCEEDED = "quota_exceeded"  # ended for want of GPU quota (a pipeline's FAILED, code 8)
    ERROR = "error"  # the API could not be reached for longer than the transient-error window
    CAPACITY_AVAILABLE = "capacity_available"  # persistent pool: the replicas are free now


JOB_EVENTS = frozenset({Event.SUCCEEDED, Event.FAILED, Event.CANCELLED, Event.PREEMPTED,
                        Event.CAPACITY_TIMEOUT, Event.QUOTA_EXCEEDED, Event.ERROR})
CAPACITY_EVENTS = frozenset({Event.CAPACITY_AVAILABLE, Event.CAPACITY_TIMEOUT, Event.FAILED, Event.ERROR})

_PREEMPTION = re.compile(r"stockout|preempt|resources are insufficient|spot vm|capacity was reclaimed", re.I)
_WAIT_EXPIRED = re.compile(r"maxWaitDuration|max_wait_duration|capacity wait|could not be scheduled "
                           r"within|could not get its resources", re.I)
_QUOTA = re.compile(r"quota metrics exceed quota limits|exceeds? (the )?quota|insufficient quota", re.I)
_USER_CODE = re.compile(r"exited with a non-zero status|non-zero exit", re.I)
_PREEMPTION_REASONS = {"STOCKOUT", "SPOT_PREEMPTED", "PREEMPTED", "ZONE_RESOURCE_POOL_EXHAUSTED"}
_WAIT_REASONS = {"FLEX_START_WAIT_EXPIRED", "MAX_WAIT_DURATION_EXCEEDED"}


def classify_failure(error: Status | None) -> Event:
    """FAILED job -> PREEMPTED, CAPACITY_TIMEOUT, QUOTA_EXCEEDED or FAILED (user code and the rest)."""
    if error is None:
        return Event.FAILED
    reasons = {str(d.get("reason", "")) for d in (error.details or []) if isinstance(d, dict)}
    if reasons & _PREEMPTION_REASONS:
        return Event.PREEMPTED
    if reasons & _WAIT_REASONS:
        return Event.CAPACITY_TIMEOUT
    message = error.message or ""
    if _USER_CODE.search(message):  # user code first: its own logs may mention anything
        return Event.FAILED
    if _WAIT_EXPIRED.search(message):
        return Event.CAPACITY_TIMEOUT
    if _QUOTA.search(message):  # checked before the stockout words: a quota message is not a stockout
        return Event.QUOTA_EXCEEDED
    if _PREEMPTION.search(message):
        return Event.PREEMPTED
    return Event.FAILED


def event_kind(job: CustomJob) -> Event | None:
    """The event a job's state calls for, or None while it is not finished."""
    state = job.state
    if state is None or not state.is_terminal():
        return None
    if state is JobState.JOB_STATE_SUCCEEDED:
        return Event.SUCCEEDED
    if state is JobState.JOB_STATE_CANCELLED:
        return Event.CANCELLED
    if state is JobState.JOB_STATE_FAILED:
        return classify_failure(job.error)
    return Event.FAILED  # EXPIRED, PARTIALLY_SUCCEEDED: not a success we can vouch for


def event_for_job(job: CustomJob, observed_restarts: int = 0) -> dict[str, Any]:
    """The JSON-safe event payload for a finished job."""
    kind = event_kind(job)
    if kind is None:
        raise ValueError(f"{job.name} is still {job.state}")
    return {"status": kind.value, "job": job.to_api(), "observed_restarts": observed_restarts,
            "message": (job.error.message if job.error else None) or job.state.value}


def error_event(message: str, job_name: str | None = None) -> dict[str, Any]:
    return {"status": Event.ERROR.value, "job_name": job_name, "message": message}


def validate_event(event: Any, allowed: frozenset[Event] = JOB_EVENTS) -> tuple[Event, dict[str, Any]]:
    """Check an event where the operator receives it: a dict whose ``status`` is in the set."""
    if not isinstance(event, dict) or "status" not in event:
        raise ValueError(f"malformed trigger event: {event!r}")
    try:
        kind = Event(event["status"])
    except ValueError:
        raise ValueError(f"unknown trigger event status {event['status']!r}") from None
    if kind not in allowed:
        raise ValueError(f"trigger event {kind.value!r} is not one of {sorted(e.value for e in allowed)}")
    if kind in JOB_EVENTS - {Event.ERROR} and allowed is JOB_EVENTS and "job" not in event:
        raise ValueError(f"trigger event {kind.value!r} carries no job")
    return kind, event
