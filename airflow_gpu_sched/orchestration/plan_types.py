"""The plan engine's vocabulary, pure: what :func:`plan_engine.decide` reads (the plan, the ledger's
state, the events) and what it returns (actions and their effects), for single jobs; a race's own
actions, events and effects are :mod:`race_engine`'s. Also the rules both read: the deadline's
budget of a step, the wording of the service's quota verdict, the step the current job runs under.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Union

from airflow_gpu_sched.orchestration.outcomes import Event
from airflow_gpu_sched.orchestration.budget import PREEMPTION_WASTE
from airflow_gpu_sched.orchestration.plans import FlexStartStep, RaceStep, SpotStep, Step, positions
from airflow_gpu_sched.orchestration.quota import increase_hint
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
    resubmit: Any = None  # orchestration/resubmit.py Policy: hardware-shaped failures resubmitted (None: never)

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
    failure_resubmits: int = 0  # jobs of this run resubmitted after a hardware-shaped failure
    completed: bool = False  # the run already succeeded (a retry of the try that saw it: ledger.py)
    last_job: str | None = None  # the job of the last finished attempt

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
                   race=RaceState.of(data.get("race")),
                   failure_resubmits=sum(1 for a in data.get("attempts", []) if a.get("resubmit")),
                   completed=bool(data.get("completed")),
                   last_job=(data.get("attempts") or [{}])[-1].get("job_name"))

    def preempted_at(self, position: int) -> int:
        return sum(1 for p, outcome in self.attempts if p == position and outcome == Event.PREEMPTED.value)


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
    paused: bool = False  # seen JOB_STATE_PAUSED: we cancelled it (outcomes.PAUSED_MESSAGE)
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
    resubmit: str | None = None  # resubmitted after a hardware-shaped failure: the rule that matched


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


@dataclass(frozen=True)
class KeepBound:
    """Keep the current job's bound before RUNNING in the ledger (kept across tries, so a
    re-attached trigger enforces the same instant); ``by`` None: no bound."""

    by: float | None = None
    why: str | None = None


@dataclass(frozen=True)
class NoteWaiting:
    """A capacity wait begins: the ledger keeps when (its first one; the wait's record counts from it)."""

    since: datetime


Effect = Union[Note, Close, Move, NewRun, Rewind, KeepBound, NoteWaiting, "CloseMember", "Won"]


@dataclass(frozen=True, kw_only=True)
class Action:
    effects: tuple[Effect, ...] = ()  # done first, in order

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(e for e in self.effects if isinstance(e, Move))

    @property
    def starts_new_run(self) -> bool:
        """A new training run starts: its first step is decided again under its own budget."""
        return any(isinstance(e, NewRun) for e in self.effects)


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
    """Wait for the job (its bound kept in the ledger first: the :class:`KeepBound` effect): :class:`JobEnded`."""

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
    """Wait for free replicas (when the wait began noted first: :class:`NoteWaiting`): :class:`CapacityEnded`."""

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


# ---------------------------------------------------------------------------------------- rules both read


def deadline_budget(plan: Plan, step: Step, now: datetime,
                    location: str | None = None) -> tuple[timedelta | None, str | None]:
    """(the FLEX_START / capacity wait clipped to the deadline, or why the step cannot run).
    A FLEX_START step with ``max_wait_duration="observed"`` asks for its wait learned in ``location``."""
    if isinstance(step, FlexStartStep) and step.observed_wait and location is not None \
            and dict(step.learned_waits or ()).get(location) == timedelta(0):  # learned_wait.SKIP
        return None, (f"max_wait_duration observed: the share of the deadline's slack left for {location} is "
                      f"less than a useful FLEX_START wait: FLEX_START in {location} skipped")
    if plan.deadline is None:
        learned = isinstance(step, FlexStartStep) and step.observed_wait
        return (step.wait_in(location) if learned else None), None  # type: ignore[union-attr]
    deadline = plan.deadline
    left = deadline - now
    needed = plan.expected_run_time or timedelta(0)
    if isinstance(step, SpotStep) and step.preemptions_in(location):  # observed: each costs half a run again
        needed = needed * (1 + PREEMPTION_WASTE * step.preemptions_in(location))
    if left <= needed:
        return None, (f"deadline {deadline.isoformat()}: {max(left, timedelta(0))} left, the job needs "
                      f"{needed} to run: {step.strategy} skipped")
    wait = left - needed
    if isinstance(step, FlexStartStep):
        if wait < MIN_FLEX_START_WAIT:
            return None, (f"deadline {deadline.isoformat()}: only {wait} would be left to wait for FLEX_START "
                          f"capacity (less than {MIN_FLEX_START_WAIT}): FLEX_START skipped")
        own = step.wait_in(location)
        return (wait if not own or own > wait else own), None
    return wait, None


def quota_failure(plan: Plan, how: str, message: str | None, location: str) -> Failure:
    """The service's own quota verdict (a 429 at create, a pipeline FAILED code 8): the same
    remedy as the preflight's, so the same error type once the plan is spent."""
    return Failure("QuotaTooLow", f"the GPU quota is too low for this job in {location}: {how} by Vertex AI; "
                   + increase_hint(message or "", location, plan.project), None, message)


def current(plan: Plan, state: State) -> tuple[Step, str]:
    """The step (and region) the current job runs under: a race's winning member, else the position's step."""
    step, location = plan.at(state.position)
    if isinstance(step, RaceStep) and state.race is not None and state.race.winner is not None:
        return step.members[state.race.winner], step.member_location(state.race.winner, location)
    return step, location
