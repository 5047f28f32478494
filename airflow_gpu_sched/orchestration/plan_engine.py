"""The decisions of a capacity plan, pure: ``decide(plan, state, event) -> action``.

No I/O and no Airflow here. The operator (:mod:`airflow_gpu_sched.operators.base`) carries
each action out (client calls, ledger writes, deferral, logs, callbacks) and feeds the result
back as the next event, until the action is :class:`Succeed` or :class:`Fail`.

- :class:`Plan`: the steps, their (step, region) positions, the deadline (absolute, already
  resolved), ``expected_run_time``; each step carries its own knobs (:mod:`.plans`).
- :class:`State`: what the submission ledger holds (:meth:`State.of` reads its data).
- Events, a closed set: :class:`TryStarted`, :class:`QuotaRead`, :class:`ResourceRead`,
  :class:`ReservationRead`, :class:`Created`, :class:`CreateRefused`, :class:`JobEnded`,
  :class:`CapacityEnded`; for a race step (the section "races" at the end):
  :class:`RaceQuotasRead`, :class:`RaceCreated`, :class:`RaceEnded`, answering
  :class:`ReadRaceQuotas`, :class:`SubmitRace`, :class:`WaitForRace`, with the effects
  :class:`CloseMember` and :class:`Won`.
- Actions, a closed set: :class:`ReadQuota`, :class:`ReadResource`, :class:`ReadReservation`, :class:`Submit`,
  :class:`WaitForJob`, :class:`ReAttach`, :class:`WaitForCapacity`, :class:`Succeed`,
  :class:`Fail`. Each carries ``effects``, done first and in order: :class:`Note` (a log line),
  :class:`Close` (close the current attempt in the ledger), :class:`Move` (the plan falls back
  to its next position). Falling back is a transition made here: the action returned is the
  first one at the new position, with the moves that led there among its effects.

The rules that live here: the deadline (steps that cannot finish are skipped, a FLEX_START
wait is clipped to the time left), the quota preflight's skip, the preemption budget, the
bound before RUNNING (:func:`plans.running_bound`), the earlier-try rules (re-attach to an
active job; a cancelled job an earlier try submitted means the task was cleared: train anew; a
job that ended unwatched is processed as its trigger would have reported it; after a failure a
retry cannot change (:data:`NO_RETRY`) a later try fails again, unless the task was cleared
since (:meth:`TryStarted.cleared_since`): then a new training run; a retry after the plan was
spent runs it again from its first step), and that only a
capacity outcome advances the plan. Every log line, error message and attempt state is worded
here, with the decision it belongs to.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal, Union

from airflow_gpu_sched.vertex.models import format_duration
from airflow_gpu_sched.orchestration.outcomes import Event
from airflow_gpu_sched.orchestration.plans import FlexStartStep, PersistentResourceStep, SpotStep, Step, positions, running_bound
from airflow_gpu_sched.orchestration.plans import RaceStep, ReservationStep
from airflow_gpu_sched.orchestration.quota import increase_hint
from airflow_gpu_sched.orchestration.budget import refusal as budget_refusal
from airflow_gpu_sched.vertex.rules import Violation

MIN_FLEX_START_WAIT = timedelta(minutes=1)  # a shorter DWS wait is not worth a submission

# ---------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    positions: tuple[tuple[int, str], ...]  # (step index, location), in the order they are tried
    project: str
    deadline: datetime | None = None  # absolute (the operator resolves a timedelta)
    expected_run_time: timedelta | None = None
    quota_preflight: bool = True
    checkpoints: str | None = None  # base_output_dir: a resubmission resumes from it
    retry_on_user_code_failure: bool = False  # an Airflow retry after a user-code failure submits a new job
    budget: Any = None  # orchestration/budget.py Budget: steps over a price cap or the budget are skipped

    @classmethod
    def of(cls, steps: list[Step], location: str, regions_first: bool = True, **knobs: Any) -> Plan:
        return cls(tuple(steps), tuple(positions(list(steps), location, regions_first)), **knobs)

    def at(self, position: int) -> tuple[Step, str]:
        step_index, location = self.positions[position]
        return self.steps[step_index], location

    def resource_name(self, step: Step, location: str) -> str:
        return f"projects/{self.project}/locations/{location}/persistentResources/{step.resource_id}"


@dataclass(frozen=True)
class State:
    """What the ledger holds that the decisions read."""

    position: int = 0
    attempts: tuple[tuple[int | None, str | None], ...] = ()  # (position, outcome) of each finished attempt
    job_name: str | None = None  # the current job
    job_try: int | None = None  # the try that submitted it (None: unknown, e.g. found by its label)
    running_by: float | None = None  # the current job's bound before RUNNING (epoch seconds)
    running_why: str | None = None
    waiting_since: datetime | None = None  # when a persistent pool's capacity wait began
    failure: Failure | None = None  # what an earlier try of this run failed with (the ledger's ``failed``)
    failed_try: int | None = None  # the try that failed so
    race: RaceState | None = None  # the current position's race, when it is one (the ledger's ``race``)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> State:
        bound = data.get("running_bound") or {}
        since = data.get("waiting_since")
        failed = data.get("failed") or {}
        failure = Failure(failed["kind"], failed.get("message", ""), failed.get("job_name"),
                          failed.get("detail")) if failed.get("kind") else None
        return cls(failure=failure, failed_try=failed.get("try"),
                   position=int(data.get("position", 0)),
                   attempts=tuple((a.get("position"), a.get("outcome")) for a in data.get("attempts", [])),
                   job_name=data.get("job_name"), job_try=data.get("job_try"), running_by=bound.get("by"),
                   running_why=bound.get("why"), waiting_since=datetime.fromisoformat(since) if since else None,
                   race=RaceState.of(data.get("race")))

    def preempted_at(self, position: int) -> int:
        return sum(1 for p, outcome in self.attempts if p == position and outcome == Event.PREEMPTED.value)


# ---------------------------------------------------------------------------------------- events


@dataclass(frozen=True, kw_only=True)
class JobEnded:
    """The trigger's event about the current job (or a job found ended when the try started)."""

    now: datetime
    kind: Event  # one of outcomes.JOB_EVENTS
    job_name: str | None = None
    job_state: str | None = None  # "JOB_STATE_FAILED" ...
    job_error: str | None = None  # the job's error.message
    message: str | None = None  # the event's message (the trigger's note for a bound's cancel)
    restarts: int = 0  # the service's restarts the poller observed
    running_bound: str | None = None  # set when the operator's bound cancelled the job: why
    max_wait: timedelta | None = None  # the job's own maxWaitDuration
    try_number: int | None = None  # the try this event arrived in
    log_tail: str | None = None  # a FAILED job's failing replica's last log lines (orchestration.log_lines)
    timed_out: bool = False  # ended by its scheduling.timeout (FAILED, or CANCELLED by the service)
    cancelled_waiting: bool = False  # CANCELLED by the service before it was seen RUNNING (a capacity outcome)
    ended_at: datetime | None = None  # the job's endTime (or updateTime): whether a kept bound had passed


@dataclass(frozen=True, kw_only=True)
class Found:
    """What an earlier try left: its job (found by name, or by its submission key's label)."""

    job_name: str
    state: str
    ended: JobEnded | None = None  # None: still active
    by_key: bool = False


@dataclass(frozen=True, kw_only=True)
class TryStarted:
    now: datetime
    try_number: int | None = None
    found: Found | None = None
    # The first try since the task instance was last cleared (Airflow's ``max_tries - retries + 1``,
    # as its TaskInstance.get_first_reschedule_date reads it): an earlier try before it was
    # followed by a clear, a deliberate rerun; one at or after it, by an Airflow retry.
    first_try: int | None = None
    # A race in flight: what became of each member's submission (by member index; None: no job
    # carries its key, or it had none yet). None when the ledger holds no race in flight.
    race_found: tuple[tuple[int, Found | None], ...] | None = None

    def cleared_since(self, try_number: int | None) -> bool:
        return try_number is not None and self.first_try is not None and try_number < self.first_try


@dataclass(frozen=True, kw_only=True)
class QuotaRead:
    now: datetime
    too_low: str | None = None  # the shortfalls, worded; None: the quota holds the job
    unreadable: bool = False


@dataclass(frozen=True, kw_only=True)
class ResourceRead:
    now: datetime
    name: str
    state: str  # "RUNNING", "PROVISIONING", "ERROR" ...
    error: str | None = None  # the resource's error.message
    mismatches: tuple[Violation, ...] = ()  # the job's pools no resource pool can hold
    runs_now: bool = False
    shortages: tuple[tuple[str, int, int], ...] = ()  # (resource pool, free, wanted)


@dataclass(frozen=True, kw_only=True)
class ReservationRead:
    """The Compute Engine reservation a RESERVATION step names, and the job's fit on it."""

    now: datetime
    name: str
    problems: tuple[str, ...] = ()  # why the job cannot run on it now (vertex.reservations.fit); (): it fits
    missing: bool = False  # reservations.get answered 404
    unreadable: str | None = None  # could not be read (no compute.reservations.get, API down): why
    free: int = 0
    count: int = 0
    needed: int = 0


@dataclass(frozen=True, kw_only=True)
class Created:
    now: datetime
    job_name: str


@dataclass(frozen=True, kw_only=True)
class CreateRefused:
    """429 RESOURCE_EXHAUSTED for a resource quota: the job alone needs more than the limit."""

    now: datetime
    message: str | None  # the service's message
    text: str  # the error as shown (status, rpc, url, message)


@dataclass(frozen=True, kw_only=True)
class CapacityEnded:
    now: datetime
    kind: Event  # one of outcomes.CAPACITY_EVENTS
    message: str | None = None


PlanEvent = Union[TryStarted, QuotaRead, ResourceRead, ReservationRead, Created, CreateRefused, JobEnded,
                  CapacityEnded, "RaceQuotasRead", "RaceCreated", "RaceEnded"]

# ---------------------------------------------------------------------------------------- outputs

FailureKind = Literal["TrainingJobFailed", "TrainingJobFailedNoRetry", "TrainingJobTimedOut", "TrainingJobCancelled",
                      "CapacityWaitExpired",
                      "PreemptionBudgetExhausted",
                      "PersistentResourceUnavailable", "PersistentCapacityTimeout", "CapacityUnavailable",
                      "QuotaTooLow", "DeadlineExceeded", "VertexUnreachable", "InvalidTrainingSpec", "BudgetExceeded"]


# The failures an Airflow retry cannot change: their errors are AirflowFailExceptions (errors.py;
# tests/test_retries.py checks the two agree), and a try that starts after one anyway (the
# earlier try's process died before Airflow saw its failure) fails again instead of training.
NO_RETRY: frozenset[str] = frozenset({"TrainingJobFailedNoRetry", "TrainingJobTimedOut", "TrainingJobCancelled",
                                      "DeadlineExceeded", "BudgetExceeded",
                                      "InvalidTrainingSpec"})
# The capacity outcomes that end a plan when no step is left: a retry (retry_delay later, when
# capacity or quota may have come back) runs the plan again from its first step, the preferred one.
PLAN_SPENT: frozenset[str] = frozenset({"CapacityWaitExpired", "PreemptionBudgetExhausted", "CapacityUnavailable",
                                        "PersistentResourceUnavailable", "PersistentCapacityTimeout", "QuotaTooLow"})


def failure_text(message: str, job_name: str | None = None, job_error: str | None = None,
                 log_tail: str | None = None) -> str:
    """How a training error reads (``errors.GpuTrainingError`` and a move's reason); a failed
    job's last log lines go last, on their own lines, so the cause shows without scrolling."""
    parts = [message]
    if job_name:
        parts.append(f"job: {job_name}")
    if job_error:
        parts.append(f"Vertex AI says: {job_error}")
    return " | ".join(parts) + (f"\n{log_tail}" if log_tail else "")


@dataclass(frozen=True)
class Failure:
    """A typed error, described: the operator raises ``errors.<kind>(message, job_name, detail)``
    (``InvalidTrainingSpec(violations, message)``)."""

    kind: FailureKind
    message: str
    job_name: str | None = None
    detail: str | None = None  # what Vertex AI said
    violations: tuple[Violation, ...] = ()
    log_tail: str | None = None  # the failing replica's last log lines (a FAILED job)

    def __str__(self) -> str:
        return failure_text(self.message, self.job_name, self.detail, self.log_tail)


@dataclass(frozen=True)
class Note:
    level: Literal["info", "warning"]
    text: str


@dataclass(frozen=True)
class Close:
    """Close the current attempt: the job's record (``job_name`` set) or one that got no job."""

    position: int
    location: str
    strategy: str
    outcome: str  # an Event value
    job_name: str | None = None
    restarts: int = 0
    state: str | None = None  # shown instead of the job's own state (with ``error``); a no-job attempt's state
    error: str | None = None
    waited: float = 0.0  # a no-job attempt: seconds waited
    preemptions: int = 0
    completed: bool = False


@dataclass(frozen=True)
class Move:
    """The plan falls back from one position to the next, for ``failure``."""

    src: int
    dst: int
    failure: Failure
    from_step: Step
    from_location: str
    to_step: Step
    to_location: str

    @property
    def text(self) -> str:
        return (f"capacity outcome on {self.from_step.describe()} in {self.from_location} ({self.failure}): "
                f"falling back to {self.to_step.describe()} in {self.to_location}")

    def record(self) -> dict[str, Any]:
        """What ``on_fallback`` is handed."""
        return {"from": self.from_step.strategy, "from_location": self.from_location, "to": self.to_step.strategy,
                "to_location": self.to_location, "reason": str(self.failure)}


@dataclass(frozen=True)
class NewRun:
    """The task was cleared after a failed try: the ledger starts a new training run (the plan
    from its first step, a new submission key, no attempts), as after a clear of a success."""


@dataclass(frozen=True)
class Rewind:
    """A retry after the plan was spent: the ledger's position goes back to the first step (the
    attempts stay: one training run; a SPOT step's preemption budget stays counted)."""


Effect = Union[Note, Close, Move, NewRun, Rewind, "CloseMember", "Won"]


@dataclass(frozen=True, kw_only=True)
class Action:
    effects: tuple[Effect, ...] = ()  # done first, in order

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(e for e in self.effects if isinstance(e, Move))


@dataclass(frozen=True, kw_only=True)
class ReadQuota(Action):
    """Read the region's GPU quota for the step's tier: answer with :class:`QuotaRead`."""

    position: int
    step: Step
    location: str


@dataclass(frozen=True, kw_only=True)
class ReadResource(Action):
    """Read the persistent resource and the job's fit on it: answer with :class:`ResourceRead`."""

    position: int
    step: Step
    location: str
    name: str


@dataclass(frozen=True, kw_only=True)
class ReadReservation(Action):
    """Read the Compute Engine reservation and the job's fit on it: answer with :class:`ReservationRead`."""

    position: int
    step: Step
    location: str
    name: str


@dataclass(frozen=True, kw_only=True)
class Submit(Action):
    """Create the job (the ledger's submission key, or a new one): :class:`Created` or :class:`CreateRefused`."""

    position: int
    step: Step
    location: str
    max_wait: timedelta | None = None  # FLEX_START: clipped to the deadline


@dataclass(frozen=True, kw_only=True)
class WaitForJob(Action):
    """Keep the bound in the ledger, then wait for the job: :class:`JobEnded`."""

    job_name: str
    running_by: float | None = None  # epoch seconds by which it must first be RUNNING
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReAttach(Action):
    """Wait for the job an earlier try submitted, under the bound that try kept: :class:`JobEnded`."""

    job_name: str
    running_by: float | None = None
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class WaitForCapacity(Action):
    """Note when the wait began, then wait for free replicas: :class:`CapacityEnded`."""

    position: int
    step: Step
    location: str
    name: str
    wait: timedelta | None  # None: for ever


@dataclass(frozen=True, kw_only=True)
class Succeed(Action):
    job_name: str


@dataclass(frozen=True, kw_only=True)
class Fail(Action):
    failure: Failure


# ---------------------------------------------------------------------------------------- decide


def decide(plan: Plan, state: State, event: PlanEvent) -> Action:
    """The next action of the plan, given what the ledger holds and what just happened."""
    if isinstance(event, TryStarted):
        return _try_started(plan, state, event)
    if isinstance(event, QuotaRead):
        return _quota_read(plan, state, event)
    if isinstance(event, ResourceRead):
        return _resource_read(plan, state, event)
    if isinstance(event, ReservationRead):
        return _reservation_read(plan, state, event)
    if isinstance(event, Created):
        return _created(plan, state, event)
    if isinstance(event, CreateRefused):
        _, location = plan.at(state.position)
        close = _no_job(plan, state, "QUOTA_EXCEEDED", event.text, event.now)
        return _fall_back(plan, state.position, _quota_failure(plan, "refused at create", event.message, location),
                          event.now, (close,))
    if isinstance(event, JobEnded):
        return _job_ended(plan, state, event, earlier_try=False)
    if isinstance(event, CapacityEnded):
        return _capacity_ended(plan, state, event)
    if isinstance(event, (RaceQuotasRead, RaceCreated, RaceEnded)):
        return _race_event(plan, state, event)
    raise TypeError(f"not a plan event: {event!r}")


def deadline_budget(plan: Plan, step: Step, now: datetime) -> tuple[timedelta | None, str | None]:
    """(the FLEX_START / capacity wait clipped to the deadline, or why the step cannot run)."""
    if plan.deadline is None:
        return None, None
    deadline = plan.deadline
    left = deadline - now
    needed = plan.expected_run_time or timedelta(0)
    if left <= needed:
        return None, (f"deadline {deadline.isoformat()}: {max(left, timedelta(0))} left, the job needs "
                      f"{needed} to run: {step.strategy} skipped")
    wait = left - needed
    if isinstance(step, FlexStartStep):
        if wait < MIN_FLEX_START_WAIT:
            return None, (f"deadline {deadline.isoformat()}: only {wait} would be left to wait for FLEX_START "
                          f"capacity (less than {MIN_FLEX_START_WAIT}): FLEX_START skipped")
        own = step.max_wait_duration
        return (wait if not own or own > wait else own), None
    return wait, None


def _try_started(plan: Plan, state: State, event: TryStarted) -> Action:
    if state.race is not None and state.race.in_flight:
        return _race_try_started(plan, state, event)
    found = event.found
    if found is None:
        failure = state.failure
        if failure is not None and event.cleared_since(state.failed_try):
            return _start(plan, 0, event.now, (NewRun(), Note("info", (
                f"try {state.failed_try} failed ({failure.kind}) and the task was cleared since: a new training "
                "run from the plan's first step"))))
        if failure is not None and failure.kind in NO_RETRY - {"InvalidTrainingSpec"}:  # its violations are re-found
            return Fail(failure=failure, effects=(Note("warning", (
                f"try {state.failed_try} failed with {failure.kind}, which a retry cannot change: failing again, "
                "no new job (clear the task to run it anew)")),))
        if failure is not None and failure.kind in PLAN_SPENT and state.position > 0:
            return _start(plan, 0, event.now, (Rewind(), Note("info", (
                f"try {state.failed_try} ended the plan ({failure.kind}): this retry runs it again from its first "
                "step"))))
        return _start(plan, state.position, event.now)
    if found.ended is not None:  # e.g. succeeded unwatched, or cancelled by a clear: see _job_ended
        note = Note("info", f"previous try's job {found.job_name} already ended {found.state}")
        as_of_now = replace(found.ended, now=event.now)  # what follows (a new job?) is decided as of this try's start
        return _job_ended(plan, state, as_of_now, earlier_try=True, effects=(note,),
                          cleared=event.cleared_since(state.job_try))
    if found.state == "JOB_STATE_CANCELLING" and not event.cleared_since(state.job_try):
        # still going down after the earlier try's cancel: past the kept bound, the bound's cancel
        cancelling = JobEnded(now=event.now, kind=Event.CANCELLED, job_name=found.job_name,
                              job_state=found.state, try_number=event.try_number, ended_at=event.now)
        if _past_kept_bound(state, cancelling):
            return _job_ended(plan, state, cancelling, earlier_try=True, effects=(Note("info", (
                f"previous try's job {found.job_name} is being cancelled, past the bound that try kept")),))
    same = "" if state.running_by is None else " (with the same bound on its time before RUNNING)"
    return ReAttach(job_name=found.job_name, running_by=state.running_by, why=state.running_why, effects=(
        Note("info", f"re-attaching to {found.job_name} ({found.state}), submitted by an earlier try{same}"),))


def _start(plan: Plan, position: int, now: datetime, effects: tuple[Effect, ...] = ()) -> Action:
    """Run the plan from ``position``: skip what the deadline rules out, read a persistent
    resource first, else the quota (when the preflight is on), else submit."""
    step, location = plan.at(position)
    _, why_not = deadline_budget(plan, step, now)
    if why_not:
        return _fall_back(plan, position, Failure("DeadlineExceeded", why_not), now, effects)
    if why_not := budget_refusal(plan.budget, step, location):  # before any GPU is asked for
        return _fall_back(plan, position, Failure("BudgetExceeded", why_not + f": {step.strategy} skipped"), now, effects)
    if isinstance(step, RaceStep):
        return _start_race(plan, position, step, location, now, effects)
    if isinstance(step, PersistentResourceStep):
        return ReadResource(position=position, step=step, location=location,
                            name=plan.resource_name(step, location), effects=effects)
    if isinstance(step, ReservationStep) and step.specific:
        return ReadReservation(position=position, step=step, location=location, name=step.specific, effects=effects)
    if isinstance(step, ReservationStep):
        effects = (*effects, Note("info", "RESERVATION(ANY): Vertex AI takes any matching reservation of the region, "
                                          "else on-demand VMs; nothing to read before submitting"))
    return _after_preflight(plan, position, now, effects)


def _after_preflight(plan: Plan, position: int, now: datetime, effects: tuple[Effect, ...]) -> Action:
    """The quota preflight (when on), else the submit."""
    step, location = plan.at(position)
    max_wait, why_not = deadline_budget(plan, step, now)
    if why_not:  # after a reservation read that took time
        return _fall_back(plan, position, Failure("DeadlineExceeded", why_not), now, effects)
    if plan.quota_preflight:
        return ReadQuota(position=position, step=step, location=location, effects=effects)
    return Submit(position=position, step=step, location=location, max_wait=max_wait, effects=effects)


def _fall_back(plan: Plan, position: int, failure: Failure, now: datetime, effects: tuple[Effect, ...]) -> Action:
    """A capacity outcome at ``position``: run the plan from the next one, or fail with
    ``failure`` when the plan is spent (with what the last step ran into)."""
    nxt = position + 1
    if nxt >= len(plan.positions):
        return Fail(failure=failure, effects=effects)
    (from_step, from_location), (to_step, to_location) = plan.at(position), plan.at(nxt)
    move = Move(position, nxt, failure, from_step, from_location, to_step, to_location)
    return _start(plan, nxt, now, (*effects, move))


def _quota_read(plan: Plan, state: State, event: QuotaRead) -> Action:
    position = state.position
    step, location = plan.at(position)
    if event.too_low:
        close = _no_job(plan, state, "QUOTA_TOO_LOW", event.too_low, event.now)
        return _fall_back(plan, position, Failure("QuotaTooLow", f"{step.strategy} skipped: {event.too_low}"),
                          event.now, (close,))
    effects: tuple[Effect, ...] = ()
    if event.unreadable:  # the preflight must never be the reason a job that would run does not
        effects = (Note("warning", f"could not read the GPU quota of {plan.project} in {location} (Cloud Quotas API "
                                   "unreachable, or no permission cloudquotas.quotas.get): submitting without the "
                                   "quota preflight"),)
    # the budget again, as of now: the read took time, and a FLEX_START wait is clipped to what is left
    max_wait, why_not = deadline_budget(plan, step, event.now)
    if why_not:
        return _fall_back(plan, position, Failure("DeadlineExceeded", why_not), event.now, effects)
    return Submit(position=position, step=step, location=location, max_wait=max_wait, effects=effects)


def _resource_read(plan: Plan, state: State, event: ResourceRead) -> Action:
    position = state.position
    step, location = plan.at(position)
    if event.state in ("ERROR", "STOPPING"):
        close = _no_job(plan, state, f"RESOURCE_{event.state}", event.error, event.now)
        failure = Failure("PersistentResourceUnavailable", f"persistent resource {event.name} is {event.state}",
                          None, event.error)
        return _fall_back(plan, position, failure, event.now, (close,))
    if event.mismatches:  # the spec cannot run there at all: bad input, not a capacity outcome
        return Fail(failure=Failure("InvalidTrainingSpec", f"job for persistent resource {step.resource_id!r}",
                                    violations=event.mismatches))
    if event.state == "RUNNING" and event.runs_now:
        return Submit(position=position, step=step, location=location)
    left, _ = deadline_budget(plan, step, event.now)
    if plan.deadline is not None and left is None:  # passed since the step began: no time left to wait
        left = timedelta(0)
    waits = [w for w in (step.capacity_wait_timeout, left) if w is not None]
    wait = min(waits) if waits else None
    shortages = "".join(f"; pool {pool} has {free} of {wanted} replicas free" for pool, free, wanted in event.shortages)
    note = Note("info", f"persistent resource {event.name} is {event.state}{shortages}: waiting up to "
                        f"{wait or 'ever'} for capacity")
    return WaitForCapacity(position=position, step=step, location=location, name=event.name, wait=wait,
                           effects=(note,))


def _reservation_read(plan: Plan, state: State, event: ReservationRead) -> Action:
    """A reservation that cannot take the job (missing, not READY, other VMs, too few free) is a
    capacity outcome of this step: the plan moves on, naming why. An unreadable one only warns."""
    position = state.position
    step, _ = plan.at(position)
    if event.unreadable:
        note = Note("warning", f"could not read reservation {event.name} ({event.unreadable}; the caller needs "
                               "compute.reservations.get): submitting without the reservation preflight")
        return _after_preflight(plan, position, event.now, (note,))
    why = (f"reservation {event.name} does not exist",) if event.missing else event.problems
    if why:
        text = "; ".join(why)
        close = _no_job(plan, state, "RESERVATION_UNAVAILABLE", text, event.now)
        failure = Failure("CapacityUnavailable", f"RESERVATION skipped: {event.name} cannot take the job: {text}")
        return _fall_back(plan, position, failure, event.now, (close,))
    note = Note("info", f"reservation {event.name}: {event.free} of {event.count} VMs free, the job needs "
                        f"{event.needed}: submitting on it")
    return _after_preflight(plan, position, event.now, (note,))


def _created(plan: Plan, state: State, event: Created) -> Action:
    """The job exists: wait for it, bounded from its submission (:func:`plans.running_bound`)."""
    step, location = _current(plan, state)
    bound = running_bound(step, event.now, plan.deadline, plan.expected_run_time)
    note = Note("info", f"submitted {event.job_name} ({step.describe()} in {location}, attempt "
                        f"{len(state.attempts) + 1})")
    return WaitForJob(job_name=event.job_name, running_by=bound[0].timestamp() if bound else None,
                      why=bound[1] if bound else None, effects=(note,))


def _job_ended(plan: Plan, state: State, event: JobEnded, earlier_try: bool,
               effects: tuple[Effect, ...] = (), cleared: bool = False) -> Action:
    """Decide on a finished job; ``earlier_try``: it was found, finished, at this try's start
    (``cleared``: and the task was cleared since that job was submitted)."""
    kind, name, said = event.kind, event.job_name, event.job_error
    if kind is Event.ERROR:
        return Fail(failure=Failure("VertexUnreachable", event.message or "Vertex AI unreachable", name),
                    effects=effects)
    # a job an earlier try submitted (this try re-attached to it, or found it finished)
    reattached = earlier_try or state.job_try != event.try_number
    if kind is Event.CAPACITY_TIMEOUT and event.cancelled_waiting and reattached:
        kind = Event.CANCELLED  # an earlier try's on_kill may have cancelled it: not a capacity outcome
    if earlier_try and not cleared and kind is Event.CANCELLED and _past_kept_bound(state, event):
        # The earlier try's trigger cancelled it at the bound, then that try died before acting on
        # the event: the outcome it would have acted on, so this try moves on as it would have.
        kind = Event.CAPACITY_TIMEOUT
        event = replace(event, running_bound=state.running_why or "running_by", message=(
            f"cancelled at its bound before RUNNING ({state.running_why or 'running_by'}) by an earlier try, "
            "which ended before acting on it"))
    index = state.position
    step, location = _current(plan, state)  # a race's winner: its member
    bounded = kind is Event.CAPACITY_TIMEOUT and bool(event.running_bound)  # our cancel, past the bound
    shown: dict[str, Any] = {}
    if kind is Event.QUOTA_EXCEEDED or bounded:  # visible as such, not as the job's FAILED / CANCELLED
        shown = {"state": "QUOTA_EXCEEDED" if kind is Event.QUOTA_EXCEEDED else "CAPACITY_TIMEOUT",
                 "error": event.message or said}
    preemptions = event.restarts + (1 if kind is Event.PREEMPTED else 0)
    close = Close(index, location, step.strategy, kind.value, job_name=name, restarts=event.restarts,
                  preemptions=preemptions, completed=kind is Event.SUCCEEDED, **shown)
    effects = (*effects, close)
    if kind is Event.SUCCEEDED:
        return Succeed(job_name=name or "", effects=effects)
    if kind is Event.CANCELLED:
        if reattached:
            # An earlier try's job: a user cleared or failed that try, and its trigger's on_kill
            # cancelled the job (possibly after this try re-attached to it). This try trains anew.
            note = Note("info", f"the job {name} an earlier try submitted was cancelled (the task was cleared or "
                                "marked failed): submitting a new one")
            return _start(plan, index, event.now, (*effects, note))
        return Fail(failure=Failure("TrainingJobCancelled", "the job was cancelled outside this task", name, said),
                    effects=effects)
    if kind is Event.FAILED and event.timed_out and not earlier_try and not plan.retry_on_user_code_failure:
        # the service ended it at scheduling.timeout (FAILED, or CANCELLED: timeoutOutcome)
        return Fail(failure=Failure("TrainingJobTimedOut", "the training job ran out its scheduling.timeout "
                                    "(counted from its first RUNNING) and the service ended it: not a capacity "
                                    "problem, not resubmitted", name, said or event.message,
                                    log_tail=event.log_tail), effects=effects)
    if kind is Event.FAILED:  # the user's code (or a timeout): never resubmitted by the plan, never falls back
        if earlier_try and (cleared or plan.retry_on_user_code_failure):
            # An earlier try's job failed and no one saw it (its worker died): this try is the
            # rerun a clear asks for, or the retry the operator was told to make.
            why = "the task was cleared since" if cleared else "retry_on_user_code_failure=True"
            note = Note("info", f"the job {name} an earlier try submitted failed ({why}): submitting a new one")
            if cleared:
                return _start(plan, 0, event.now, (*effects, NewRun(), note))
            return _start(plan, index, event.now, (*effects, note))
        if plan.retry_on_user_code_failure:
            return Fail(failure=Failure("TrainingJobFailed", "the training job failed (not a capacity problem: not "
                                        "resubmitted by the plan; an Airflow retry submits a new job, "
                                        "retry_on_user_code_failure=True)", name, said, log_tail=event.log_tail),
                    effects=effects)
        return Fail(failure=Failure("TrainingJobFailedNoRetry", "the training job failed (not a capacity problem: "
                                    "not resubmitted, not retried by Airflow: retry_on_user_code_failure=False)",
                                    name, said, log_tail=event.log_tail), effects=effects)
    if kind is Event.PREEMPTED and isinstance(step, SpotStep):
        preempted_here = state.preempted_at(index) + 1  # with this attempt
        if preempted_here <= step.max_preemption_retries:
            note = Note("warning", f"{name} was preempted past the service's restarts: resubmitting "
                                   f"({preempted_here} of {step.max_preemption_retries}), resuming from the "
                                   f"checkpoints in {plan.checkpoints or '(no base_output_dir!)'}")
            return Submit(position=index, step=step, location=location, effects=(*effects, note))
        failure = Failure("PreemptionBudgetExhausted", f"SPOT job preempted past the service's restarts "
                          f"{preempted_here} time(s); max_preemption_retries={step.max_preemption_retries} spent",
                          name, said)
    elif bounded:
        failure = Failure("CapacityWaitExpired", f"{step.strategy} job not RUNNING within its bound "
                          f"({event.running_bound}): cancelled", name, event.message)
    elif kind is Event.CAPACITY_TIMEOUT:
        # Named from the job's own spec: an EXPIRED job carries no error message to quote.
        waited = f"maxWaitDuration ({format_duration(event.max_wait)})" if event.max_wait is not None \
            else "maxWaitDuration"
        failure = Failure("CapacityWaitExpired", f"FLEX_START capacity never came: the job waited its {waited} "
                          "without getting all its GPUs at once", name, said or f"the job ended {event.job_state}")
    elif kind is Event.QUOTA_EXCEEDED:
        failure = _quota_failure(plan, f"{name} FAILED for quota", said, location)
    elif kind is Event.PREEMPTED:  # on a step that is not SPOT: the service gave up for want of capacity
        failure = Failure("CapacityUnavailable", f"{step.strategy}: no capacity, the service gave up after its own "
                          "retries (stockout)", name, said)
    else:
        failure = Failure("CapacityUnavailable", f"the job ended by {kind.value}", name, said)
    return _fall_back(plan, index, failure, event.now, effects)


def _past_kept_bound(state: State, event: JobEnded) -> bool:
    """A CANCELLED job of an earlier try ended at or after the bound before RUNNING that try kept
    in the ledger: the bound's cancel (the trigger cancels only a job never RUNNING by then; a clear's
    cancel is told apart by ``cleared``)."""
    return state.running_by is not None and event.ended_at is not None \
        and event.ended_at.timestamp() >= state.running_by and event.job_name == state.job_name


def _capacity_ended(plan: Plan, state: State, event: CapacityEnded) -> Action:
    position = state.position
    step, location = plan.at(position)
    if event.kind is Event.CAPACITY_AVAILABLE:
        return Submit(position=position, step=step, location=location,
                      effects=(Note("info", f"capacity is free ({event.message}): submitting"),))
    if event.kind is Event.ERROR:
        return Fail(failure=Failure("VertexUnreachable", event.message or "Vertex AI unreachable"))
    timed_out = event.kind is Event.CAPACITY_TIMEOUT
    close = _no_job(plan, state, "CAPACITY_TIMEOUT" if timed_out else "RESOURCE_UNAVAILABLE", event.message, event.now)
    failure = Failure("PersistentCapacityTimeout" if timed_out else "PersistentResourceUnavailable",
                      f"persistent resource {step.resource_id} "
                      f"{'stayed busy past its capacity wait' if timed_out else 'cannot take the job'}",
                      None, event.message)
    return _fall_back(plan, position, failure, event.now, (close,))


def _no_job(plan: Plan, state: State, shown: str, error: str | None, now: datetime) -> Close:
    """An attempt that never got a job (a busy or failed persistent pool, a quota refusal)."""
    step, location = plan.at(state.position)
    waited = (now - state.waiting_since).total_seconds() if state.waiting_since else 0.0
    return Close(state.position, location, step.strategy, Event.CAPACITY_TIMEOUT.value, state=shown, error=error,
                 waited=waited)


def _quota_failure(plan: Plan, how: str, message: str | None, location: str) -> Failure:
    """The service's own quota verdict (a 429 at create, a pipeline FAILED code 8): the same
    remedy as the preflight's, so the same error type once the plan is spent."""
    return Failure("QuotaTooLow", f"the GPU quota is too low for this job in {location}: {how} by Vertex AI; "
                   + increase_hint(message or "", location, plan.project), None, message)


# ---------------------------------------------------------------------------------------- races
#
# A race step (plans.RaceStep) submits all its members at once, each under its own submission
# key (kept in the ledger's ``race`` block before its create, the job's name after it), waits
# for all of them with one trigger, keeps the first *seen* RUNNING (never by ``startTime``: real
# Vertex sets it at admission, so every member has one while all still wait) and cancels the
# others at once. The tie rule, when several members are seen RUNNING in one poll: the member
# order (the trigger applies it: triggers/race.py). From its win
# on the winner is the position's job, under its member's rules (a SPOT winner's preemptions,
# the FLEX_START wording). When every member ends on a capacity outcome, the plan moves on;
# a member that fails for its code fails the task (the others are cancelled), as a single job.


@dataclass(frozen=True)
class RaceMember:
    """One member of the race in flight, as the ledger holds it."""

    index: int  # into RaceStep.members
    key: str | None = None
    job_name: str | None = None
    running_by: float | None = None
    why: str | None = None
    closed: bool = False  # its attempt is recorded (a loser, or a member the race lost)


@dataclass(frozen=True)
class RaceState:
    members: tuple[RaceMember, ...]
    winner: int | None = None  # member index
    try_number: int | None = None  # the try that started the race

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> RaceState | None:
        if not data:
            return None
        members = tuple(RaceMember(int(m["index"]), m.get("key"), m.get("job_name"), m.get("running_by"), m.get("why"),
                                   bool(m.get("closed"))) for m in data.get("members", []))
        return cls(members, data.get("winner"), data.get("try"))

    @property
    def in_flight(self) -> bool:
        """Submitted (or being submitted), no winner yet, and not every member's attempt recorded."""
        return self.winner is None and bool(self.members) and not all(m.closed for m in self.members)

    def member(self, index: int) -> RaceMember | None:
        return next((m for m in self.members if m.index == index), None)


@dataclass(frozen=True)
class RaceEntry:
    """A member to submit: its index, step, region and (FLEX_START) wait clipped to the deadline."""

    index: int
    step: Step
    location: str
    max_wait: timedelta | None = None


@dataclass(frozen=True)
class RaceWait:
    index: int
    job_name: str
    running_by: float | None = None  # epoch seconds: this member must be RUNNING by then
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReadRaceQuotas(Action):
    """Read each member's regional GPU quota: answer with :class:`RaceQuotasRead`."""

    position: int
    step: RaceStep
    members: tuple[RaceEntry, ...]


@dataclass(frozen=True, kw_only=True)
class SubmitRace(Action):
    """Create the members that have no job yet, each under its own key (``new``: a fresh race,
    the ledger's race block is started anew first): answer with :class:`RaceCreated`."""

    position: int
    step: RaceStep
    members: tuple[RaceEntry, ...]
    new: bool = True


@dataclass(frozen=True, kw_only=True)
class WaitForRace(Action):
    """Keep each member's bound in the ledger, then wait for all of them with one trigger:
    :class:`RaceEnded`."""

    position: int
    members: tuple[RaceWait, ...]


@dataclass(frozen=True, kw_only=True)
class RaceQuotasRead:
    now: datetime
    too_low: tuple[tuple[int, str], ...] = ()  # (member index, the shortfalls worded)
    unreadable: tuple[int, ...] = ()  # members whose quota could not be read (submitted anyway)


@dataclass(frozen=True, kw_only=True)
class RaceCreated:
    now: datetime
    jobs: tuple[tuple[int, str], ...]  # (member index, job name): every member that has a job now
    refused: tuple[tuple[int, str | None, str], ...] = ()  # (member index, service message, text): 429 at create


@dataclass(frozen=True, kw_only=True)
class MemberEnded:
    """One member as the race's trigger last saw it."""

    index: int
    job_name: str
    kind: Event | None  # None: still active (the winner, RUNNING)
    by_race: bool = False  # cancelled by the race as a loser
    job_state: str | None = None
    job_error: str | None = None
    message: str | None = None
    restarts: int = 0
    running_bound: str | None = None  # set when its bound before RUNNING cancelled it
    max_wait: timedelta | None = None
    cancelled_waiting: bool = False  # CANCELLED, not by us, before it was seen RUNNING


@dataclass(frozen=True, kw_only=True)
class RaceEnded:
    """The race trigger's event: a winner (the others cancelled and followed to their end), or
    no winner (every member ended; or one failed for its code and the others were cancelled)."""

    now: datetime
    winner: int | None
    members: tuple[MemberEnded, ...]
    error: str | None = None  # the API stayed unreachable
    try_number: int | None = None


@dataclass(frozen=True)
class CloseMember:
    """Record a race member's attempt (a loser, or a member of a race that had no winner)."""

    position: int
    index: int
    location: str
    strategy: str
    outcome: str  # an Event value
    job_name: str
    race: Literal["lost", "no_winner"]
    restarts: int = 0
    state: str | None = None  # shown instead of the job's own state (with ``error``)
    error: str | None = None


@dataclass(frozen=True)
class Won:
    """The member ``index`` won: its job becomes the position's current job."""

    index: int
    job_name: str


# capacity outcomes of a member: the race goes on without it, and when all are such, the plan moves on
_MEMBER_CAPACITY = frozenset({Event.CAPACITY_TIMEOUT, Event.PREEMPTED, Event.QUOTA_EXCEEDED})


def _current(plan: Plan, state: State) -> tuple[Step, str]:
    """The step (and region) the current job runs under: a race's winning member, else the position's step."""
    step, location = plan.at(state.position)
    if isinstance(step, RaceStep) and state.race is not None and state.race.winner is not None:
        return step.members[state.race.winner], step.member_location(state.race.winner, location)
    return step, location


def _entries(plan: Plan, step: RaceStep, location: str, now: datetime,
             indices: tuple[int, ...] | None = None) -> tuple[list[RaceEntry], list[str]]:
    """The members that can still run (deadline), with their clipped waits; and why the others cannot."""
    entries, skipped = [], []
    for index, member in enumerate(step.members):
        if indices is not None and index not in indices:
            continue
        max_wait, why_not = deadline_budget(plan, member, now)
        if why_not:
            skipped.append(f"member {index} ({member.strategy}): {why_not}")
            continue
        entries.append(RaceEntry(index, member, step.member_location(index, location), max_wait))
    return entries, skipped


def _start_race(plan: Plan, position: int, step: RaceStep, location: str, now: datetime,
                effects: tuple[Effect, ...]) -> Action:
    entries, skipped = _entries(plan, step, location, now)
    effects = (*effects, *(Note("info", f"race: {why}") for why in skipped))
    if not entries:
        return _fall_back(plan, position, Failure("DeadlineExceeded", "; ".join(skipped)), now, effects)
    if plan.quota_preflight:
        return ReadRaceQuotas(position=position, step=step, members=tuple(entries), effects=effects)
    return SubmitRace(position=position, step=step, members=tuple(entries), effects=effects)


def _race_try_started(plan: Plan, state: State, event: TryStarted) -> Action:
    """A race in flight when this try started: re-attach to every member that has a job and
    create only the missing ones (a worker killed between two creates)."""
    race = state.race
    assert race is not None
    step, location = plan.at(state.position)
    assert isinstance(step, RaceStep), "a race block belongs to a race position"
    found = dict(event.race_found or ())
    have = [(m.index, found[m.index].job_name) for m in race.members if found.get(m.index) is not None]
    missing = tuple(m.index for m in race.members if found.get(m.index) is None and not m.closed)
    if missing:
        entries, skipped = _entries(plan, step, location, event.now, missing)
        notes = [Note("info", f"race: re-attaching to {', '.join(n for _, n in have) or 'no job'}; creating only the "
                              f"missing member(s) {', '.join(str(e.index) for e in entries)}")]
        notes += [Note("info", f"race: {why}") for why in skipped]
        if entries:
            return SubmitRace(position=state.position, step=step, members=tuple(entries), new=False,
                              effects=tuple(notes))
        event_created = RaceCreated(now=event.now, jobs=tuple(have))
        return _race_created(plan, state, event_created, tuple(notes))
    waits = tuple(RaceWait(m.index, name, m.running_by, m.why) for (i, name) in have
                  for m in race.members if m.index == i)
    return WaitForRace(position=state.position, members=waits, effects=(Note("info", (
        f"re-attaching to the race of {len(waits)} members an earlier try submitted: "
        + ", ".join(w.job_name for w in waits))),))


def _race_event(plan: Plan, state: State, event: RaceQuotasRead | RaceCreated | RaceEnded) -> Action:
    if isinstance(event, RaceQuotasRead):
        return _race_quotas_read(plan, state, event)
    if isinstance(event, RaceCreated):
        return _race_created(plan, state, event)
    return _race_ended(plan, state, event)


def _race_quotas_read(plan: Plan, state: State, event: RaceQuotasRead) -> Action:
    position = state.position
    step, location = plan.at(position)
    assert isinstance(step, RaceStep)
    entries, skipped = _entries(plan, step, location, event.now)  # as of now: the reads took time
    low = dict(event.too_low)
    effects: list[Effect] = [Note("info", f"race: {why}") for why in skipped]
    effects += [Note("warning", f"could not read the GPU quota in {e.location} for race member {e.index}: "
                                "submitting it without the quota preflight")
                for e in entries if e.index in event.unreadable]
    for entry in entries:
        if entry.index in low:
            effects.append(Close(position, entry.location, entry.step.strategy, Event.CAPACITY_TIMEOUT.value,
                                 state="QUOTA_TOO_LOW", error=low[entry.index]))
    entries = [e for e in entries if e.index not in low]
    if not entries:
        why = "; ".join(f"member {i}: {text}" for i, text in event.too_low) or "; ".join(skipped)
        kind: FailureKind = "QuotaTooLow" if event.too_low else "DeadlineExceeded"
        return _fall_back(plan, position, Failure(kind, f"race skipped: {why}"), event.now, tuple(effects))
    return SubmitRace(position=position, step=step, members=tuple(entries), effects=tuple(effects))


def _race_created(plan: Plan, state: State, event: RaceCreated, effects: tuple[Effect, ...] = ()) -> Action:
    """The members exist: wait for all of them, each bounded from its own submission."""
    position = state.position
    step, location = plan.at(position)
    assert isinstance(step, RaceStep)
    out: list[Effect] = list(effects)
    for index, message, text in event.refused:
        out.append(Close(position, step.member_location(index, location), step.members[index].strategy,
                         Event.CAPACITY_TIMEOUT.value, state="QUOTA_EXCEEDED", error=text))
    if not event.jobs:
        failure = _quota_failure(plan, "refused at create for every race member",
                                 event.refused[0][1] if event.refused else None, location)
        return _fall_back(plan, position, failure, event.now, tuple(out))
    waits = []
    for index, name in event.jobs:
        kept = state.race.member(index) if state.race is not None else None
        if kept is not None and kept.running_by is not None:  # an earlier try's bound holds
            waits.append(RaceWait(index, name, kept.running_by, kept.why))
            continue
        bound = running_bound(step.members[index], event.now, plan.deadline, plan.expected_run_time)
        waits.append(RaceWait(index, name, bound[0].timestamp() if bound else None, bound[1] if bound else None))
    out.append(Note("info", f"race of {len(waits)} submitted ({step.describe()}): "
                            + ", ".join(f"[{w.index}] {w.job_name}" for w in waits)))
    return WaitForRace(position=position, members=tuple(waits), effects=tuple(out))


def _close_member(plan: Plan, state: State, member: MemberEnded, race: Literal["lost", "no_winner"]) -> CloseMember:
    step, location = plan.at(state.position)
    assert isinstance(step, RaceStep)
    kind = member.kind or Event.CANCELLED
    bounded = kind is Event.CAPACITY_TIMEOUT and bool(member.running_bound)
    shown = {"state": "CAPACITY_TIMEOUT", "error": member.message} if bounded else \
        {"state": "QUOTA_EXCEEDED", "error": member.message or member.job_error} if kind is Event.QUOTA_EXCEEDED else {}
    return CloseMember(state.position, member.index, step.member_location(member.index, location),
                       step.members[member.index].strategy, kind.value, member.job_name, race,
                       restarts=member.restarts, **shown)


def _cancelled_by_an_earlier_try(member: MemberEnded) -> MemberEnded:
    """A member of a race an earlier try submitted that was cancelled while waiting, not by
    us: that try's ``on_kill`` (the task was cleared), landing after this try re-attached."""
    if member.kind is Event.CAPACITY_TIMEOUT and member.cancelled_waiting and not member.by_race:
        return replace(member, kind=Event.CANCELLED)
    return member


def _race_ended(plan: Plan, state: State, event: RaceEnded) -> Action:
    race = state.race
    position = state.position
    step, location = plan.at(position)
    assert isinstance(step, RaceStep) and race is not None
    if event.error is not None:
        return Fail(failure=Failure("VertexUnreachable", event.error))  # a retry re-attaches to every member
    earlier_try = race.try_number != event.try_number
    if earlier_try:  # as for a single job: the earlier try's on_kill may have cancelled them
        event = replace(event, members=tuple(_cancelled_by_an_earlier_try(m) for m in event.members))
    open_members = [m for m in event.members if not (race.member(m.index) or RaceMember(m.index)).closed]
    if event.winner is not None:
        winner = next(m for m in event.members if m.index == event.winner)
        losers = [m for m in open_members if m.index != winner.index]
        effects: tuple[Effect, ...] = (
            *(_close_member(plan, state, m, "lost") for m in losers), Won(winner.index, winner.job_name),
            Note("info", f"race won by member {winner.index} ({step.members[winner.index].describe()} in "
                         f"{step.member_location(winner.index, location)}): {winner.job_name}; cancelled "
                         + (", ".join(m.job_name for m in losers) or "none")))
        won = replace(state, race=replace(race, winner=winner.index), job_name=winner.job_name,
                      job_try=race.try_number)
        if winner.kind is not None:  # it ended before the race was decided (ran between two polls)
            ended = JobEnded(now=event.now, kind=winner.kind, job_name=winner.job_name, job_state=winner.job_state,
                             job_error=winner.job_error, message=winner.message, restarts=winner.restarts,
                             running_bound=winner.running_bound, max_wait=winner.max_wait,
                             try_number=race.try_number)
            return _job_ended(plan, won, ended, earlier_try=False, effects=effects)
        return WaitForJob(job_name=winner.job_name, effects=effects)
    closes = tuple(_close_member(plan, state, m, "no_winner") for m in open_members)
    kinds = [m.kind for m in event.members]
    failed = next((m for m in event.members if m.kind in (Event.FAILED, Event.SUCCEEDED)), None)
    if failed is not None and failed.kind is Event.FAILED:  # a member's code failed: never a capacity outcome
        if plan.retry_on_user_code_failure:
            failure = Failure("TrainingJobFailed", "a race member's training job failed (not a capacity problem: "
                              "the others were cancelled; an Airflow retry submits a new race, "
                              "retry_on_user_code_failure=True)", failed.job_name, failed.job_error)
        else:
            failure = Failure("TrainingJobFailedNoRetry", "a race member's training job failed (not a capacity "
                              "problem: the others were cancelled, not resubmitted, not retried by Airflow: "
                              "retry_on_user_code_failure=False)", failed.job_name, failed.job_error)
        return Fail(failure=failure, effects=closes)
    if all(k is Event.CANCELLED for k in kinds):  # nobody's capacity outcome: cancelled outside the race
        if earlier_try:
            note = Note("info", "every member of the race an earlier try submitted was cancelled (the task was "
                                "cleared or marked failed): starting a new race")
            return _start(plan, position, event.now, (*closes, note))
        return Fail(failure=Failure("TrainingJobCancelled", "every member of the race was cancelled outside this task",
                                    event.members[0].job_name if event.members else None), effects=closes)
    why = "; ".join(f"[{m.index}] {m.kind.value if m.kind else 'active'}"
                    + (f" ({m.running_bound})" if m.running_bound else "") for m in event.members)
    failure = Failure("CapacityWaitExpired" if any(k is Event.CAPACITY_TIMEOUT for k in kinds) else "CapacityUnavailable",
                      f"no member of the race got its GPUs: {why}")
    return _fall_back(plan, position, failure, event.now, closes)
