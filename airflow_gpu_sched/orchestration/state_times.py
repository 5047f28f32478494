"""When a job got capacity, from the states the pollers *observed*, never from ``startTime``.

Real Vertex AI sets ``startTime`` about 140 ms after ``createTime``, at admission, while the job
still waits QUEUED/PENDING (recorded real traffic: cloud-custodian's vertexai_custom_job_* and
vertexai_hp_tuning_job_* flights; docs/fidelity.md). So "got capacity" is the first RUNNING a
poll saw, and its time is bounded by the polls:

- each state change is noted at the first poll that saw it: ``at`` is the job's ``updateTime``
  in that poll (the service's clock, so comparable with ``createTime``/``endTime`` under the
  emulator's fast clock too); the change happened at or before it, and exactly at it when the
  change was the job's latest update; ``after`` is the ``updateTime`` the previous poll saw (the
  change came after that poll, so after it): the change lies in ``(after, at]``;
- a job that ended SUCCEEDED (or FAILED by its code, its timeout or a preemption) with no
  RUNNING seen still ran: its start lies between the last waiting observation and ``endTime``;
- Vertex's own log entries (``ml.googleapis.com/job_state``), when read, make a time exact.

The record is JSON-safe (the trigger event carries it under ``observed``; the ledger's attempt
keeps what :func:`running_span` makes of it). Pure functions: the triggers do the polling.

May import: vertex; never airflow.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import CustomJob, Scheduling
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp

RUNNING = JobState.JOB_STATE_RUNNING.value
CANCELLING = JobState.JOB_STATE_CANCELLING.value
WAITING = frozenset({JobState.JOB_STATE_QUEUED.value, JobState.JOB_STATE_PENDING.value,
                     JobState.JOB_STATE_UNSPECIFIED.value})
PAUSED = JobState.JOB_STATE_PAUSED.value
SUCCEEDED = JobState.JOB_STATE_SUCCEEDED.value
# the service cancels at scheduling.timeout counted from the first RUNNING: an end this close to
# it (or later) is the timeout's, given the poll's bound on when RUNNING began
TIMEOUT_SLACK = timedelta(seconds=1)


def parse_timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def new() -> dict[str, Any]:
    return {"seen": {}, "last": None}


def _iso(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def note(times: dict[str, Any], job: CustomJob, polled_at: float) -> dict[str, Any]:
    """Record one successful poll of ``job`` (a custom job or another job type's view) at
    ``polled_at`` (epoch seconds, the poller's wall clock). Returns ``times``, updated."""
    state = job.state.value if job.state else JobState.JOB_STATE_UNSPECIFIED.value
    update = _iso(job.update_time)
    last = times.get("last")
    if last is None or last["state"] != state:
        times["seen"].setdefault(state, {
            "at": update, "after": last["update_time"] if last else None,
            "polled_at": polled_at, "previous_poll": last["polled_at"] if last else None, "exact": False})
    times["last"] = {"state": state, "update_time": update, "polled_at": polled_at}
    return times


def refine(times: dict[str, Any], state: str, when: datetime) -> dict[str, Any]:
    """A time Google states (a log entry of the job's state change): exact from now on."""
    entry = times["seen"].setdefault(state, {"polled_at": None, "previous_poll": None})
    entry.update(at=_iso(when), after=_iso(when), exact=True)
    return times


def seen_running(times: dict[str, Any] | None) -> bool:
    return bool(times) and RUNNING in times["seen"]


def seen_cancelling(times: dict[str, Any] | None) -> bool:
    """A poll saw the job CANCELLING: someone (we, an earlier try's on_kill, a user) cancelled it."""
    return bool(times) and CANCELLING in times["seen"]


def has_run(job: CustomJob, times: dict[str, Any] | None) -> bool:
    """Got capacity: RUNNING now or seen before, or ended SUCCEEDED (a job that succeeded ran,
    seen or not). Never ``startTime``: real Vertex sets it at admission."""
    state = job.state
    return (state is JobState.JOB_STATE_RUNNING or state is JobState.JOB_STATE_SUCCEEDED
            or seen_running(times))


def is_waiting(state: JobState | str | None) -> bool:
    """Neither running with capacity, nor ending, nor ended: QUEUED, PENDING, PAUSED, UPDATING and
    every state this code does not know (the JobState enum grows: EXPIRED, UPDATING and
    PARTIALLY_SUCCEEDED came as its numbers 9-11). The bounds on the time before RUNNING
    (``capacity_wait_timeout``, the deadline) apply to all of them: a state nobody foresaw must
    not wait unbounded."""
    value = getattr(state, "value", state) or JobState.JOB_STATE_UNSPECIFIED.value
    return value not in (RUNNING, CANCELLING) and not JobState(value).is_terminal()


def is_known(state: JobState | str | None) -> bool:
    """A state of the JobState enum as this code knows it (an unknown one is logged once as such)."""
    return state is None or JobState(getattr(state, "value", state)).is_known


def capacity_state(own: JobState | None, job: JobState | None) -> JobState | None:
    """The state of a tuning job or pipeline that says RUNNING, as the custom job that holds its
    GPUs says (a pipeline's backing job, a tuning job's first trial's job): RUNNING only when
    that job runs (or ran: SUCCEEDED, the pipeline registers its model); the job's waiting state
    while it waits (observed: a pipeline RUNNING minutes before its job has GPUs, docs/fidelity.md);
    PENDING when the job ended without success while the owner still says RUNNING (it is ending:
    no capacity to claim). ``job`` None (not read): the owner's own state."""
    if own is not JobState.JOB_STATE_RUNNING or job is None:
        return own
    if job.value in (RUNNING, SUCCEEDED):
        return JobState.JOB_STATE_RUNNING
    return job if is_waiting(job) else JobState.JOB_STATE_PENDING


def past_running_bound(job: CustomJob, times: dict[str, Any] | None, running_by: float | None,
                       now: float) -> bool:
    """The operator's bound on the time before RUNNING: True when ``running_by`` (epoch seconds)
    has passed, the job was never seen RUNNING and still waits (:func:`is_waiting`: QUEUED,
    PENDING, PAUSED or a state unknown to this code), whatever its ``startTime`` says."""
    return running_by is not None and now >= running_by and not has_run(job, times) and is_waiting(job.state)


def ended_at_timeout(job: CustomJob, times: dict[str, Any] | None) -> bool:
    """A job that ran and ended when its ``scheduling.timeout`` (counted from the first RUNNING)
    ran out, within the poll's bound on when RUNNING began."""
    scheduling = job.job_spec.scheduling if job.job_spec else None
    timeout = scheduling.timeout if scheduling else None
    span = running_span(job, times)
    if not timeout or span is None or job.end_time is None:
        return False
    earliest = parse_timestamp(span["earliest"])
    return job.end_time - earliest >= timeout - TIMEOUT_SLACK


def could_have_timed_out(job: CustomJob, times: dict[str, Any] | None) -> bool:
    """A job no poll saw RUNNING that the service may have ended at its ``scheduling.timeout``:
    between the latest moment it can have begun RUNNING (its ``startTime``, set at or before the
    first RUNNING, or the last waiting state a poll saw, whichever is later) and its ``endTime``
    (the service's clock) lies at least the timeout. A cancel from outside ends a job earlier:
    the service would have ended one that ran this long itself."""
    scheduling = job.job_spec.scheduling if job.job_spec else None
    timeout = scheduling.timeout if scheduling else None
    if not timeout or job.end_time is None or job.start_time is None:
        return False
    seen = (times or {}).get("seen", {})
    waited = [parse_timestamp(e["at"]) for s, e in seen.items() if is_waiting(s) and e.get("at")]
    began = max([job.start_time, *waited])
    return job.end_time - began >= timeout - TIMEOUT_SLACK


def ended_at_max_wait(job: CustomJob) -> bool:
    """A FLEX_START job that ended when its ``maxWaitDuration`` (counted from its create) ran out,
    by the service's own ``createTime`` and ``endTime`` (its clock, not ours): the service ending
    the wait. No ``maxWaitDuration``: the documented default (1 day); ``0s`` waits forever."""
    scheduling = job.job_spec.scheduling if job.job_spec else None
    if scheduling is None:
        return False
    wait = scheduling.max_wait_duration if scheduling.max_wait_duration is not None else Scheduling.DEFAULT_MAX_WAIT
    strategy = getattr(scheduling.strategy, "value", scheduling.strategy)
    if strategy != "FLEX_START" or not wait or job.end_time is None or job.create_time is None:
        return False
    return job.end_time - job.create_time >= wait - TIMEOUT_SLACK


def running_span(job: CustomJob, times: dict[str, Any] | None, outcome: str | None = None) -> dict[str, Any] | None:
    """When the job began RUNNING, as well as the observations tell; None: it never ran (as far
    as anyone saw). ``running_since``: the figure used (the end of the poll's bound, or the start
    of the bound for a job whose RUNNING no poll saw); ``earliest``: the bound's start;
    ``exact``; ``bound_seconds``: how far off ``running_since`` may be; ``source``: ``poll``,
    ``log`` or ``end`` (inferred from how the job ended)."""
    created = job.create_time
    # startTime is at or before the first RUNNING under both readings (the proto's comment: at
    # it; recorded real traffic: at admission), so it can narrow a bound, never make one
    floor = job.start_time
    seen = (times or {}).get("seen", {})
    entry = seen.get(RUNNING)
    if entry is not None and entry.get("at"):
        at = parse_timestamp(entry["at"])
        after = parse_timestamp(entry["after"]) if entry.get("after") else created
        after = max(after, floor) if after is not None and floor is not None else (after or floor or at)
        after = min(after, at)
        exact = bool(entry.get("exact"))
        return {"running_since": entry["at"], "earliest": _iso(after), "exact": exact,
                "bound_seconds": 0.0 if exact else round((at - after).total_seconds(), 3),
                "source": "log" if exact else "poll"}
    if job.state is JobState.JOB_STATE_SUCCEEDED or (job.state is JobState.JOB_STATE_FAILED
                                                     and _ran_to_fail(job, outcome)):
        end = job.end_time or job.update_time
        if end is None:
            return None
        last_waiting = max((parse_timestamp(e["at"]) for s, e in seen.items() if s in WAITING and e.get("at")),
                           default=created)
        start = last_waiting or end
        if floor is not None and floor <= end:
            start = max(start, floor)
        return {"running_since": _iso(start), "earliest": _iso(start), "exact": False,
                "bound_seconds": round(max(0.0, (end - start).total_seconds()), 3), "source": "end"}
    return None


def _ran_to_fail(job: CustomJob, outcome: str | None) -> bool:
    """FAILED in a way only a running job can, by its ``outcome`` (outcomes.Event's value):
    its code or its timeout (``failed``), or preempted past the service's restarts (a SPOT
    stockout; not one in the queue, "Resources are insufficient", which never ran), or by a
    cancel's SIGTERM (``cancelled``: only a running container exits on it)."""
    if outcome in ("failed", "cancelled"):
        return True
    if outcome == "preempted":
        message = ((job.error.message if job.error else "") or "").lower()
        return ("preempt" in message or "reclaimed" in message) and "insufficient" not in message
    return False


def times_summary(job: CustomJob, times: dict[str, Any] | None, outcome: str | None = None) -> dict[str, Any]:
    """The attempt's ``times`` (XCom): ``running_since`` (None: never ran), ``exact``,
    ``bound_seconds`` (0 when exact), ``source``."""
    span = running_span(job, times, outcome)
    if span is None:
        return {"running_since": None, "exact": True, "bound_seconds": 0.0, "source": "never_ran"}
    return {k: span[k] for k in ("running_since", "exact", "bound_seconds", "source")}
