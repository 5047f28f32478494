"""The I/O of a hedged race (a plan's ``{"race": [...]}`` step), carried out for the operator.

The decisions are :mod:`plan_engine`'s (``ReadRaceQuotas``, ``SubmitRace``, ``WaitForRace``;
``CloseMember``, ``Won``); this module reads the quotas, creates the members, waits for them
with one :class:`~airflow_gpu_sched.triggers.race.RaceTrigger`, and keeps the ledger's ``race``
block (:mod:`ledger`):

- each member's submission key is saved before its create, its job name right after: a
  worker killed between two creates leaves the names made and the key of the one in flight, so
  the next try re-attaches to what exists (a key with no name is looked up by its label) and
  creates only the missing members;
- a loser's attempt (and each member's, when the race had no winner) is recorded from a GET of
  its job once the trigger followed it to its end: queued time, and for one that started before
  its cancel landed, run time and GPU-hours (estimates from the job's timestamps, as for every
  attempt: :mod:`accounting`); the record and the member's ``closed`` mark go in one write.

May import: vertex, orchestration, triggers, operators; airflow.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators import events, observe, vertex_calls
from airflow_gpu_sched.operators.running import now as _now
from airflow_gpu_sched.operators.running import try_number as _try_number
from airflow_gpu_sched.orchestration.accounting import attempt_record
from airflow_gpu_sched.orchestration.job_types import job_type_of
from airflow_gpu_sched.orchestration.ledger import RACE_KEY
from airflow_gpu_sched.orchestration.outcomes import JOB_EVENTS, validate_event

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.ledger import SubmissionLedger

RACE_EVENTS = ("race_won", "race_ended", "error")


def _block(ledger: SubmissionLedger) -> dict[str, Any]:
    return ledger.race or {}


def in_flight(ledger: SubmissionLedger) -> bool:
    race = _block(ledger)
    return race.get("winner") is None and bool(race.get("members")) and \
        not all(m.get("closed") for m in race["members"])


def member_jobs(ledger: SubmissionLedger) -> list[str]:
    """The race's jobs not yet recorded (what a kill in sync mode cancels)."""
    return [m["job_name"] for m in _block(ledger).get("members", []) if m.get("job_name") and not m.get("closed")]


# ---------------------------------------------------------------------------------------- actions


def read_quotas(op: Any, context: Any, ledger: SubmissionLedger, action: engine.ReadRaceQuotas,
                ended: Any = None) -> tuple[engine.RaceQuotasRead, None]:
    from airflow_gpu_sched.orchestration import plan_engine as engine

    too_low, unreadable = [], []
    for entry in action.members:
        read = vertex_calls.read_quota(op, entry.step, entry.location)
        if read.unreadable:
            unreadable.append(entry.index)
        elif read.too_low:
            too_low.append((entry.index, read.too_low))
    return engine.RaceQuotasRead(now=_now(), too_low=tuple(too_low), unreadable=tuple(unreadable)), None


def wait(op: Any, context: Any, ledger: SubmissionLedger, action: engine.WaitForRace,
         ended: Any = None) -> tuple[engine.RaceEnded, Any]:
    # kept across tries: a re-attached trigger enforces the same instants
    ledger.update_members({w.index: {"running_by": w.running_by, "why": w.why} for w in action.members})
    return race_event(op, context, wait_for_race(op, context, action))


def submit(op: Any, context: Any, ledger: SubmissionLedger, action: engine.SubmitRace,
           ended: Any = None) -> tuple[engine.RaceCreated, None]:
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.vertex.client import QuotaExceededError

    if action.new or not ledger.race:
        ledger.start_race(_try_number(context))
    # every member of the race, before the first create: a retry knows what is missing
    ledger.update_members({entry.index: {} for entry in action.members})
    refused = []
    for entry in action.members:
        if (ledger.race_member(entry.index) or {}).get("job_name"):
            continue
        try:
            submit_member(op, context, ledger, entry)
        except QuotaExceededError as exc:
            if not exc.is_resource_quota:
                raise
            ledger.update_members({entry.index: {"closed": True}})  # its no-job attempt is the engine's Close
            refused.append((entry.index, exc.message, str(exc)))
    jobs = tuple((m["index"], m["job_name"]) for m in _block(ledger)["members"]
                 if m.get("job_name") and not m.get("closed"))
    return engine.RaceCreated(now=_now(), jobs=jobs, refused=tuple(refused)), None


def submit_member(op: Any, context: Any, ledger: SubmissionLedger, entry: engine.RaceEntry) -> str:
    """Create one member under its own submission key (saved first; an ambiguous create is
    reconciled by that key's label, as a single job's); its name is saved before anything else."""
    key = (ledger.race_member(entry.index) or {}).get("key")
    if not key:
        key = uuid.uuid4().hex
        ledger.update_members({entry.index: {"key": key}})
    job = op.validated_job(context, key, entry.step, entry.max_wait)
    created = vertex_calls.create(op, job, key, entry.location, f"race member {entry.index}")
    ledger.update_members({entry.index: {"job_name": created.name}})
    op.log.info("race member %s (%s in %s): created %s", entry.index, entry.step.strategy, entry.location,
                created.name)
    return created.name


def found_members(op: Any, ledger: SubmissionLedger) -> tuple[tuple[int, Any], ...] | None:
    """At a try's start, each member of a race in flight: its job (by name, or by its key's
    label when the try that created it died before saving the name), or None."""
    from airflow_gpu_sched.orchestration import plan_engine as engine

    if not in_flight(ledger):
        return None
    found = []
    step_location = op.positions()[ledger.position][1]
    for member in _block(ledger)["members"]:
        if member.get("closed"):
            continue
        resource, by_key = None, False
        if member.get("job_name"):
            resource = vertex_calls.find_by_name(op, member["job_name"], missing_ok=True)
        elif member.get("key"):
            step = op.plan[ledger.position]
            location = step.member_location(member["index"], step_location)
            resource, by_key = vertex_calls.find_by_key(op, member["key"], location), True
            if resource is not None:
                ledger.update_members({member["index"]: {"job_name": resource.name}})
        if resource is None:
            found.append((member["index"], None))
            continue
        view = job_type_of(resource.name).view(resource)
        found.append((member["index"], engine.Found(job_name=view.name, state=view.state.value, by_key=by_key)))
    return tuple(found)


def wait_for_race(op: Any, context: Any, action: engine.WaitForRace) -> dict[str, Any]:
    """Wait for every member with one trigger (deferred, or the same trigger in this process)."""
    from airflow_gpu_sched.triggers.race import RaceTrigger

    trigger = RaceTrigger([w.job_name for w in action.members], [w.index for w in action.members], op.gcp_conn_id,
                          op.poll_interval, op.transient_error_window, running_by=[w.running_by for w in action.members],
                          bound_reasons=[w.why for w in action.members], impersonation_chain=op.impersonation_chain)
    op.race_jobs = [w.job_name for w in action.members]
    return op.wait_on(trigger, "execute_race")


def race_event(op: Any, context: Any, payload: Any) -> tuple[engine.RaceEnded, Any]:
    """The race trigger's event, checked, as the plan's event (and the winner's resource when it ended)."""
    from airflow_gpu_sched.orchestration import plan_engine as engine

    if not isinstance(payload, dict) or payload.get("status") not in RACE_EVENTS:
        raise ValueError(f"malformed race trigger event: {payload!r}")
    try_number = _try_number(context)
    if payload["status"] == "error":
        return engine.RaceEnded(now=_now(), winner=None, members=(), error=payload.get("message") or "unreachable",
                                try_number=try_number), None
    members, ended = [], None
    ledger = getattr(op, "run_ledger", None)
    for m in payload["members"]:
        if ledger is not None and isinstance(m.get("observed"), dict):  # kept: the winner's trigger goes on from it
            ledger.keep_observed(m["job_name"], m["observed"])
        if m.get("event") is None:
            members.append(engine.MemberEnded(index=int(m["index"]), job_name=m["job_name"], kind=None,
                                              by_race=bool(m.get("by_race"))))
            continue
        validate_event(m["event"], JOB_EVENTS)
        job, resource = events.job_event(op, context, m["event"])
        if m["index"] == payload.get("winner"):
            ended = resource
        members.append(engine.MemberEnded(
            index=int(m["index"]), job_name=m["job_name"], kind=job.kind, by_race=bool(m.get("by_race")),
            job_state=job.job_state, job_error=job.job_error, message=job.message, restarts=job.restarts,
            running_bound=job.running_bound, max_wait=job.max_wait,
            cancelled_waiting=job.cancelled_waiting))
    return engine.RaceEnded(now=_now(), winner=payload.get("winner"), members=tuple(members),
                            try_number=try_number), ended


# ---------------------------------------------------------------------------------------- effects


def won(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.Won, ended: Any = None) -> None:
    """The member ``effect.index`` won: its job becomes the task's job."""
    ledger.race_won(effect.index, effect.job_name)
    op.running_job = effect.job_name
    op.race_jobs = []
    observe.job_created(context, effect.job_name)


def close_member(op: Any, context: Any, ledger: SubmissionLedger, close: engine.CloseMember,
                 ended: Any = None) -> None:
    """A member's attempt, from its job as it ended (a GET: the list views carry no pools)."""
    kind = job_type_of(close.job_name)
    resource = vertex_calls.find_by_name(op, close.job_name)
    job = kind.view(resource)
    observed = ledger.observed(close.job_name)
    record = attempt_record(job, close.strategy, close.outcome, close.restarts, kind.gpu_hours(resource), observed)
    record.update(position=close.position, location=close.location, race=close.race, race_member=close.index)
    if close.state:
        record.update(state=close.state, error=close.error)
    ledger.close_member(close.index, record)  # one write with the member's mark
    observe.attempt_closed(op, record, close.preemptions, "race member {} {}: {}".format(  # as a single job's
        close.index, "lost, cancelled" if close.race == "lost" else "ended", job.state.value if job.state else "?"))


def mark_winner(ledger: SubmissionLedger, record: dict[str, Any]) -> None:
    """The winner's attempt (and a SPOT winner's resubmissions) carry ``race: "won"``."""
    race = _block(ledger)
    if race.get("winner") is not None:
        record.update(race="won", race_member=race["winner"])
