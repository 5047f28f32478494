"""A hedged race's decisions, pure (a plan's ``{"race": [...]}`` step, :class:`plans.RaceStep`).

A race step submits all its members at once, each under its own submission key (kept in the
ledger's ``race`` block before its create, the job's name after it), waits for all of them with
one trigger, keeps the first *seen* RUNNING (never by ``startTime``: real Vertex sets it at
admission, so every member has one while all still wait) and cancels the others at once: the
winner rule is :func:`race_verdict` (the trigger carries it out). From its win on the winner is
the position's job, under its member's rules (a SPOT winner's preemptions, the FLEX_START
wording). When every member ends on a capacity outcome, the plan moves on; a member that fails
for its code fails the task (the others are cancelled), as a single job.

:mod:`plan_engine` calls :func:`start`, :func:`try_started` and :func:`race_event`; each returns
an action, or what the plan does next (:class:`FallBack`, :class:`RunAgain`,
:class:`WinnerEnded`): the plan-level moves stay the engine's.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, Union

from airflow_gpu_sched.orchestration.outcomes import Event
from airflow_gpu_sched.orchestration.plan_types import (
    Action,
    Close,
    Effect,
    Fail,
    Failure,
    FailureKind,
    JobEnded,
    KeepBound,
    Note,
    Plan,
    RaceMember,
    State,
    TryStarted,
    WaitForJob,
    deadline_budget,
    quota_failure,
)
from airflow_gpu_sched.orchestration.plans import RaceStep, Step, running_bound

LOST_STATES = ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")  # a member in one never wins


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
    preemptions: int = 0  # as a single job's Close counts them


@dataclass(frozen=True)
class Won:
    """The member ``index`` won: its job becomes the position's current job."""

    index: int
    job_name: str


# ---------------------------------------------------------------------------------------- the winner rule


@dataclass(frozen=True)
class MemberSeen:
    """One member as the race's trigger last saw it."""

    index: int  # its member index: the tie rule's order
    state: str  # JOB_STATE_...
    ran: bool  # seen RUNNING (now or in an earlier poll) or SUCCEEDED: watch.has_run
    terminal: bool
    failed: bool  # ended for its code (outcomes.event_kind FAILED)


def race_verdict(seen: Sequence[MemberSeen | None],
                 bounded: Collection[int]) -> tuple[int | None, tuple[int, ...] | None]:
    """(the winner's slot in ``seen``, the slots to cancel now); ``None`` to cancel: not decided yet.

    ``seen``: each member by slot (None: not seen yet); ``bounded``: the slots the trigger
    cancelled at their own bound before RUNNING. The winner is, among the members seen running
    and not cancelling, the first in member order (the tie rule, when several were seen running
    in one poll, or in the polls of two regions before the trigger looked); never by
    ``startTime``. A member our bound cancelled that SUCCEEDED all the same (it got its VMs as
    the cancel went out) trained: it may win. A winner, or a member failed for its code, decides
    the race: every other member not yet ended (nor cancelled at its bound) is cancelled."""
    started = [(m.index, slot) for slot, m in enumerate(seen)
               if m is not None and m.ran and m.state not in LOST_STATES
               and (slot not in bounded or m.state == "JOB_STATE_SUCCEEDED")]
    winner = min(started)[1] if started else None
    if winner is None and not any(m is not None and m.failed for m in seen):
        return None, None
    return winner, tuple(slot for slot, m in enumerate(seen)
                         if slot != winner and slot not in bounded and (m is None or not m.terminal))


# ---------------------------------------------------------------------------------------- what the plan does next


@dataclass(frozen=True)
class FallBack:
    """The race is spent: the plan falls back from ``position`` (the engine's move)."""

    position: int
    failure: Failure
    now: datetime
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True)
class RunAgain:
    """Run the plan from ``position`` again (a race an earlier try's clear cancelled)."""

    position: int
    now: datetime
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True)
class WinnerEnded:
    """The winner ended before the race was decided: its end, as a single job's, under ``state``."""

    state: State
    ended: JobEnded
    effects: tuple[Effect, ...] = ()


Next = Union[Action, FallBack, RunAgain, WinnerEnded]

# ---------------------------------------------------------------------------------------- decisions


def _entries(plan: Plan, step: RaceStep, location: str, now: datetime,
             indices: tuple[int, ...] | None = None) -> tuple[list[RaceEntry], list[str]]:
    """The members that can still run (deadline), with their clipped waits; and why the others cannot."""
    entries, skipped = [], []
    for index, member in enumerate(step.members):
        if indices is not None and index not in indices:
            continue
        where = step.member_location(index, location)
        max_wait, why_not = deadline_budget(plan, member, now, where)
        if why_not:
            skipped.append(f"member {index} ({member.strategy}): {why_not}")
            continue
        entries.append(RaceEntry(index, member, where, max_wait))
    return entries, skipped


def start(plan: Plan, position: int, step: RaceStep, location: str, now: datetime,
                effects: tuple[Effect, ...]) -> Next:
    entries, skipped = _entries(plan, step, location, now)
    effects = (*effects, *(Note("info", f"race: {why}") for why in skipped))
    if not entries:
        return FallBack(position, Failure("DeadlineExceeded", "; ".join(skipped)), now, effects)
    if plan.quota_preflight:
        return ReadRaceQuotas(position=position, step=step, members=tuple(entries), effects=effects)
    return SubmitRace(position=position, step=step, members=tuple(entries), effects=effects)


def try_started(plan: Plan, state: State, event: TryStarted) -> Next:
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


def race_event(plan: Plan, state: State, event: RaceQuotasRead | RaceCreated | RaceEnded) -> Next:
    if isinstance(event, RaceQuotasRead):
        return _race_quotas_read(plan, state, event)
    if isinstance(event, RaceCreated):
        return _race_created(plan, state, event)
    return _race_ended(plan, state, event)


def _race_quotas_read(plan: Plan, state: State, event: RaceQuotasRead) -> Next:
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
        return FallBack(position, Failure(kind, f"race skipped: {why}"), event.now, tuple(effects))
    return SubmitRace(position=position, step=step, members=tuple(entries), effects=tuple(effects))


def _race_created(plan: Plan, state: State, event: RaceCreated, effects: tuple[Effect, ...] = ()) -> Next:
    """The members exist: wait for all of them, each bounded from its own submission."""
    position = state.position
    step, location = plan.at(position)
    assert isinstance(step, RaceStep)
    out: list[Effect] = list(effects)
    for index, message, text in event.refused:
        out.append(Close(position, step.member_location(index, location), step.members[index].strategy,
                         Event.CAPACITY_TIMEOUT.value, state="QUOTA_EXCEEDED", error=text))
    if not event.jobs:
        failure = quota_failure(plan, "refused at create for every race member",
                                 event.refused[0][1] if event.refused else None, location)
        return FallBack(position, failure, event.now, tuple(out))
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
                       restarts=member.restarts, preemptions=member.restarts + (1 if kind is Event.PREEMPTED else 0),
                       **shown)


def _cancelled_by_an_earlier_try(member: MemberEnded) -> MemberEnded:
    """A member of a race an earlier try submitted that was cancelled while waiting, not by
    us: that try's ``on_kill`` (the task was cleared), landing after this try re-attached."""
    if member.kind is Event.CAPACITY_TIMEOUT and member.cancelled_waiting and not member.by_race:
        return replace(member, kind=Event.CANCELLED)
    return member


def _race_ended(plan: Plan, state: State, event: RaceEnded) -> Next:
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
            return WinnerEnded(won, ended, effects)
        return WaitForJob(job_name=winner.job_name, effects=(*effects, KeepBound()))
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
            return RunAgain(position, event.now, (*closes, note))
        return Fail(failure=Failure("TrainingJobCancelled", "every member of the race was cancelled outside this task",
                                    event.members[0].job_name if event.members else None), effects=closes)
    why = "; ".join(f"[{m.index}] {m.kind.value if m.kind else 'active'}"
                    + (f" ({m.running_bound})" if m.running_bound else "") for m in event.members)
    failure = Failure("CapacityWaitExpired" if any(k is Event.CAPACITY_TIMEOUT for k in kinds) else "CapacityUnavailable",
                      f"no member of the race got its GPUs: {why}")
    return FallBack(position, failure, event.now, closes)
