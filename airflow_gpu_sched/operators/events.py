"""What came back, as the plan's event: a job trigger's event (checked, with the job as it
ended), the persistent-capacity trigger's event, and what an earlier try of the task left (its
job, found by name or by its submission key's label, still active or ended).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators import vertex_calls
from airflow_gpu_sched.operators.running import now, try_number

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.job_types import JobType
    from airflow_gpu_sched.orchestration.ledger import SubmissionLedger


@dataclass(frozen=True)
class Ended:
    """The resource a job ended as (its record and the task's outputs are read from it)."""

    kind: JobType
    resource: Any
    observed: dict[str, Any] | None = None  # the states the trigger saw (orchestration/state_times.py)


def job_event(op: Any, context: Any, payload: Any) -> tuple[engine.JobEnded, Ended | None]:
    """A trigger's job event, checked, as the plan's event (and the resource it ended as)."""
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.orchestration.outcomes import JOB_EVENTS, Event, validate_event

    kind, payload = validate_event(payload, JOB_EVENTS)
    at, tried = now(), try_number(context)
    if payload.get("cancelled_waiting") and _cancelled_by_us(op, context, payload["job"].get("name")):
        # a trigger that did not know of our cancel (another process's on_kill): ours, not the wait's end
        kind, payload = Event.CANCELLED, {**payload, "status": Event.CANCELLED.value, "cancelled_waiting": False}
    if kind is Event.ERROR:
        return engine.JobEnded(now=at, kind=kind, job_name=payload.get("job_name"),
                               message=payload.get("message"), try_number=tried), None
    job_kind = job_type_of(payload["job"]["name"])
    resource = job_kind.resource_of(payload)
    if job_kind.listed_without_details(resource):  # the poller's list page omits e.g. trials
        resource = job_kind.get(op.client(vertex_calls.location_of(resource.name)), resource.name)
    job = job_kind.view(resource)
    scheduling = job.job_spec.scheduling
    job_error, log_tail = job.error.message if job.error else None, None
    if kind is Event.FAILED:  # the texts that may quote the job's output: its secrets cut
        job_error, log_tail = vertex_calls.failed_job_texts(op, job.name, job_error)
    return engine.JobEnded(
        now=at, kind=kind, job_name=job.name, job_state=job.state.value if job.state else None,
        job_error=job_error, message=payload.get("message"),
        restarts=int(payload.get("observed_restarts", 0)), running_bound=payload.get("running_bound"),
        max_wait=scheduling.max_wait_duration if scheduling else None, try_number=tried,
        log_tail=log_tail, timed_out=bool(payload.get("timed_out")),
        cancelled_waiting=bool(payload.get("cancelled_waiting")), paused=bool(payload.get("paused")), ended_at=job.end_time or job.update_time,
    ), Ended(job_kind, resource, payload.get("observed"))


def _cancelled_by_us(op: Any, context: Any, job_name: str | None) -> bool:
    """This task sent a cancel for the job: in this process, or recorded by an earlier on_kill."""
    from airflow_gpu_sched.orchestration import stops
    from airflow_gpu_sched.orchestration.ledger import SubmissionLedger

    if stops.cancelled_here(job_name):
        return True
    ledger = op.run_ledger if op.run_ledger is not None else SubmissionLedger.from_context(context)
    return ledger.cancelled_by_us(job_name)


def capacity_event(payload: Any) -> engine.CapacityEnded:
    """The persistent-capacity trigger's event, checked."""
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.outcomes import CAPACITY_EVENTS, validate_event

    kind, payload = validate_event(payload, CAPACITY_EVENTS)
    return engine.CapacityEnded(now=now(), kind=kind, message=payload.get("message"))


def try_started(op: Any, context: Any, ledger: SubmissionLedger,
                race_found: Any = None) -> tuple[engine.TryStarted, Ended | None]:
    """What an earlier try left: its job, still active or ended (then as its trigger would tell);
    ``race_found``: a race in flight's members (operators/race.py ``found_members``)."""
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.job_types import job_type_of

    if ledger.completed:  # a retry of the try that saw the run succeed: its job, for the outputs only
        return engine.TryStarted(now=now(), try_number=try_number(context), first_try=first_try(op, context)), \
            _completed_job(op, ledger)
    resource, by_key = _find_existing(op, ledger)
    found, ended = None, None
    if resource is not None:
        kind = job_type_of(resource.name)
        existing = kind.view(resource)
        event = None
        if existing.is_terminal():
            event, ended = job_event(op, context, kind.event(resource))
        else:  # closed as it is when the engine reads a CANCELLING job past its bound as ended
            ended = Ended(kind, resource, None)
        found = engine.Found(job_name=existing.name, state=existing.state.value, ended=event, by_key=by_key)
    return engine.TryStarted(now=now(), try_number=try_number(context), found=found,
                             first_try=first_try(op, context), race_found=race_found), ended


def _completed_job(op: Any, ledger: SubmissionLedger) -> Ended | None:
    """The job the completed run succeeded with, read again (None when it cannot be read)."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of

    name = (ledger.attempts or [{}])[-1].get("job_name")
    resource = vertex_calls.find_by_name(op, name) if name else None
    return None if resource is None else Ended(job_type_of(resource.name), resource, None)


def first_try(op: Any, context: Any) -> int | None:
    """The first try since the task instance was last cleared (a clear sets ``max_tries`` to
    the tries so far plus ``retries``; Airflow reads it the same way)."""
    max_tries = getattr(context.get("ti"), "max_tries", None)
    return None if max_tries is None else int(max_tries) - (op.retries or 0) + 1


def _find_existing(op: Any, ledger: SubmissionLedger) -> tuple[Any, bool]:
    """The resource (of the job type) an earlier try submitted, if any; and whether it was
    found by its submission key's label."""
    location = op.positions()[ledger.position][1]
    if ledger.job_name:
        return vertex_calls.find_by_name(op, ledger.job_name), False
    if ledger.submission_key:  # an earlier try died between the create and saving the name
        found = vertex_calls.find_by_key(op, ledger.submission_key, location)
        if found is not None:
            ledger.record_job(found.name)
        return found, found is not None
    return None, False
