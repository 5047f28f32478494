"""How a job ended, told apart in one place, and the events triggers send about it.

The triggers (async) and the operators' sync mode both turn a finished job into one of the
closed set of :class:`Event` kinds with :func:`event_for_job`, and the operator validates
what it receives with :func:`validate_event`. :func:`classify_failure` is the one classifier
that tells a preemption/stockout or an expired capacity wait from a failure of the user's
code; it reads the user's patterns, the ``google.rpc.ErrorInfo`` reason when the service gives
one, else the message, matched against the phrasings Vertex AI uses (the data:
:mod:`airflow_gpu_sched.orchestration.failure_patterns`; tests hold real-shaped examples).

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import enum
from typing import Any

from airflow_gpu_sched.orchestration import failure_patterns, state_times
from airflow_gpu_sched.orchestration.event_fields import public_resource
from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import CustomJob, Status


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

_KIND_EVENT = {"failed": Event.FAILED, "capacity_timeout": Event.CAPACITY_TIMEOUT,
               "quota_exceeded": Event.QUOTA_EXCEEDED, "preempted": Event.PREEMPTED}


def classify_failure(error: Status | None) -> Event:
    """FAILED job -> PREEMPTED, CAPACITY_TIMEOUT, QUOTA_EXCEEDED or FAILED (user code and the rest).
    The reasons and patterns are data in :mod:`airflow_gpu_sched.orchestration.failure_patterns`, which users
    extend with the ``[gpu_sched] failure_patterns`` option."""
    if error is None:
        return Event.FAILED
    reasons = frozenset(str(d.get("reason", "")) for d in (error.details or []) if isinstance(d, dict)) - {""}
    message = error.message or ""
    known = failure_patterns.patterns()
    kind = known.user_kind(message, reasons)  # the user's patterns first: a config change wins
    if kind is None:
        if reasons & failure_patterns.PREEMPTED_REASONS:
            return Event.PREEMPTED
        if reasons & failure_patterns.WAIT_EXPIRED_REASONS:
            return Event.CAPACITY_TIMEOUT
        kind = known.built_in_kind(message)
    return _KIND_EVENT[kind] if kind else Event.FAILED


class CancelCause(str, enum.Enum):
    """Who ended a CANCELLED job (:func:`cancel_cause`)."""

    OURS = "ours"  # we sent a cancel for it: on_kill, a bound, a lost race
    WAIT_EXPIRED = "wait_expired"  # the service ended a FLEX_START wait at its maxWaitDuration
    TIMED_OUT = "timed_out"  # the service ended it at its scheduling.timeout (variant timeoutOutcome)
    UNKNOWN = "unknown"  # someone else (a user in the console, another tool): cancelled outside the task


# What a try does with a job the service shows PAUSED (docs/operators.md): Google's SDKs take
# PAUSED for "complete" (it is neither a success nor a failure of the training); we cancel the job
# (a paused job may hold or take GPUs again) and fail the try with this message, never retried.
PAUSED_MESSAGE = ("the job is JOB_STATE_PAUSED: this task does not wait on, or resume, a paused job "
                  "(Google's SDKs take PAUSED as complete, with no result); cancelled it")


_CANCEL_EVENT = {CancelCause.OURS: Event.CANCELLED, CancelCause.UNKNOWN: Event.CANCELLED,
                 CancelCause.TIMED_OUT: Event.FAILED, CancelCause.WAIT_EXPIRED: Event.CAPACITY_TIMEOUT}


def cancel_cause(job: CustomJob, times: dict[str, Any] | None, ours: bool) -> CancelCause:
    """The one rule for a CANCELLED job. A cancel we sent is ours, whatever the timestamps say (it
    is never the service's verdict). Else the service's own end is recognised from the job's
    timestamps, in the service's clock, against the wait it was given: ``endTime - createTime``
    reached ``maxWaitDuration`` (FLEX_START, never seen RUNNING) is the wait's expiry; ``endTime``
    a ``scheduling.timeout`` after the first RUNNING is the timeout. Anything else, including a
    job that was only seen waiting and then CANCELLED early, is a cancel from outside: not a
    capacity outcome. ``times`` None (nobody watched it): no verdict but UNKNOWN."""
    if ours:
        return CancelCause.OURS
    if times is None:
        return CancelCause.UNKNOWN
    if _service_timeout(job, times):
        return CancelCause.TIMED_OUT
    if not state_times.seen_running(times) and state_times.ended_at_max_wait(job):
        return CancelCause.WAIT_EXPIRED
    return CancelCause.UNKNOWN


def event_kind(job: CustomJob, times: dict[str, Any] | None = None, ours: bool = False) -> Event | None:
    """The event a job's state calls for, or None while it is not finished. ``times``: what the
    polls saw (:mod:`state_times`; None: not watched, e.g. found ended at a try's start);
    ``ours``: we cancelled it (a bound, a lost race). "Got capacity" is a RUNNING seen, never
    ``startTime`` (real Vertex sets it at admission)."""
    state = job.state
    if state is None or not state.is_terminal():
        return None
    if state is JobState.JOB_STATE_SUCCEEDED:
        return Event.SUCCEEDED
    if state is JobState.JOB_STATE_CANCELLED:
        return _CANCEL_EVENT[cancel_cause(job, times, ours)]
    if state is JobState.JOB_STATE_FAILED:
        kind = classify_failure(job.error)
        if kind is Event.FAILED and not timed_out(job, times) and cancel_failed(job, times, ours):
            return Event.CANCELLED  # the cancel's SIGTERM ended it: no failure of the user's code
        return kind
    if state is JobState.JOB_STATE_EXPIRED and not state_times.seen_running(times):
        # Google does not say what a FLEX_START job shows when maxWaitDuration runs out: FAILED
        # (classified by its error), EXPIRED or CANCELLED. One not seen RUNNING waited for
        # capacity and got none: a capacity outcome, never the user's failure.
        return Event.CAPACITY_TIMEOUT
    return Event.FAILED  # EXPIRED after running, PARTIALLY_SUCCEEDED: not a success we can vouch for


def cancel_failed(job: CustomJob, times: dict[str, Any] | None = None, ours: bool = False) -> bool:
    """A FAILED job whose end is a cancel's: CANCELLING "may only go to either JOB_STATE_SUCCEEDED,
    JOB_STATE_FAILED or JOB_STATE_CANCELLED" (job_state.proto), and a container the cancel's SIGTERM
    killed exits non-zero. Told by: we cancelled it (``ours``: a bound, a lost race), a poll saw it
    CANCELLING (an earlier try's on_kill, a user), or its error says it (the assumed wording,
    :data:`failure_patterns.CANCEL_ENDED`). Only a failure classified as the user's comes here: a
    stockout or a quota end keeps its kind. A cancelled job that SUCCEEDED is not one: it did
    complete, and its output is used (docs/operators.md)."""
    if job.state is not JobState.JOB_STATE_FAILED:
        return False
    message = (job.error.message if job.error else None) or ""
    return ours or state_times.seen_cancelling(times) or bool(failure_patterns.CANCEL_ENDED.search(message))


def cancel_ended(job: CustomJob, times: dict[str, Any] | None = None) -> bool:
    """Our cancel (a bound's, a lost race's) ended the job: CANCELLED, or FAILED by the cancel's
    SIGTERM (:func:`cancel_failed`). SUCCEEDED, a stockout or a quota end are ends of their own."""
    return event_kind(job, times, ours=True) is Event.CANCELLED


def timed_out(job: CustomJob, times: dict[str, Any] | None = None) -> bool:
    """Ended by its ``scheduling.timeout``: FAILED with the timeout's reason or wording, or
    CANCELLED when the timeout ran out (variant ``timeoutOutcome: cancelled``)."""
    if job.state is JobState.JOB_STATE_FAILED and job.error is not None:
        reasons = {str(d.get("reason", "")) for d in (job.error.details or []) if isinstance(d, dict)}
        return "JOB_TIMEOUT" in reasons or "scheduling.timeout" in (job.error.message or "")
    return job.state is JobState.JOB_STATE_CANCELLED and times is not None and _service_timeout(job, times)


def _service_timeout(job: CustomJob, times: dict[str, Any]) -> bool:
    """The service ended it at ``scheduling.timeout``: counted from the RUNNING a poll saw, or,
    when no poll saw it run (a poll interval longer than the run), by the service's own
    ``startTime``/``endTime`` (:func:`state_times.could_have_timed_out`). A FLEX_START job not
    seen RUNNING that ended at its ``maxWaitDuration`` is the wait's expiry, not a timeout."""
    if state_times.seen_running(times):
        return state_times.ended_at_timeout(job, times)
    return state_times.could_have_timed_out(job, times) and not state_times.ended_at_max_wait(job)


def event_for_job(job: CustomJob, observed_restarts: int = 0, times: dict[str, Any] | None = None,
                  ours: bool = False) -> dict[str, Any]:
    """The JSON-safe event payload for a finished job, the job cut to what the operator decides by
    (:mod:`airflow_gpu_sched.orchestration.event_fields`; never its env, args or command).
    ``observed`` (what the polls saw), ``timed_out`` and ``cancelled_waiting`` are keys of their own."""
    kind = event_kind(job, times, ours)
    if kind is None:
        raise ValueError(f"{job.name} is still {job.state}")
    payload = {"status": kind.value, "job": public_resource(job), "observed_restarts": observed_restarts,
               "message": (job.error.message if job.error else None) or job.state.value}
    if times is not None:
        payload["observed"] = times
    if kind is Event.FAILED and timed_out(job, times):
        payload["timed_out"] = True
        if job.state is JobState.JOB_STATE_CANCELLED:
            payload["message"] = "the service cancelled the job when its scheduling.timeout ran out"
    if kind is Event.CANCELLED and job.state is JobState.JOB_STATE_FAILED:
        payload["cancel_ended"] = job.state.value  # CANCELLING ended FAILED (the cancel's SIGTERM)
    if kind is Event.SUCCEEDED and state_times.seen_cancelling(times):
        payload["cancel_ended"] = job.state.value  # it completed despite a cancel: used (docs/operators.md)
    if kind is Event.CAPACITY_TIMEOUT and job.state is JobState.JOB_STATE_CANCELLED:
        payload["cancelled_waiting"] = True  # not by us, never seen RUNNING, ended at its maxWaitDuration
        payload["message"] = ("the service cancelled the job when its maxWaitDuration ran out, before it was seen "
                              "RUNNING (no capacity in time)")
    return payload


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
