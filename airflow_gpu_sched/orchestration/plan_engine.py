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
  to its next position), :class:`KeepBound` and :class:`NoteWaiting` (the ledger keeps the job's
  bound before RUNNING, and when a capacity wait began): the actions and their effects are the
  whole transition of the ledger. Falling back is a transition made here: the action returned is the
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

from dataclasses import replace

from airflow_gpu_sched.orchestration import race_engine as races
from airflow_gpu_sched.orchestration.budget import refusal as budget_refusal
from airflow_gpu_sched.orchestration.outcomes import PAUSED_MESSAGE, Event
from airflow_gpu_sched.orchestration.plan_types import *  # noqa: F403 (the engine's vocabulary, re-exported)
from airflow_gpu_sched.orchestration.plan_types import current as _current
from airflow_gpu_sched.orchestration.plan_types import quota_failure as _quota_failure
from airflow_gpu_sched.orchestration.plans import PersistentResourceStep, RaceStep, ReservationStep, SpotStep, running_bound
from airflow_gpu_sched.orchestration.race_engine import *  # noqa: F403 (a race's actions, events, effects)
from airflow_gpu_sched.orchestration.resubmit import Verdict, classify
from airflow_gpu_sched.vertex.wire_scalars import format_duration


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
        return _then(plan, races.race_event(plan, state, event))
    raise TypeError(f"not a plan event: {event!r}")


def _try_started(plan: Plan, state: State, event: TryStarted) -> Action:
    if state.completed:  # the ledger keeps a completed run only for a retry of the try that saw it
        return Succeed(job_name=state.last_job or "", effects=(Note("warning", (
            f"the training run already succeeded (job {state.last_job}) and the try that saw it ended before "
            "Airflow recorded the success: succeeding from it, no new job")),))
    if state.race is not None and state.race.in_flight:
        return _then(plan, races.try_started(plan, state, event))
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
    _, why_not = deadline_budget(plan, step, now, location)
    if why_not:
        return _fall_back(plan, position, Failure("DeadlineExceeded", why_not), now, effects)
    if why_not := budget_refusal(plan.budget, step, location):  # before any GPU is asked for
        return _fall_back(plan, position, Failure("BudgetExceeded", why_not + f": {step.strategy} skipped"), now, effects)
    if isinstance(step, RaceStep):
        return _then(plan, races.start(plan, position, step, location, now, effects))
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
    max_wait, why_not = deadline_budget(plan, step, now, location)
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
    max_wait, why_not = deadline_budget(plan, step, event.now, location)
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
    left, _ = deadline_budget(plan, step, event.now, location)
    if plan.deadline is not None and left is None:  # passed since the step began: no time left to wait
        left = timedelta(0)
    waits = [w for w in (step.capacity_wait_timeout, left) if w is not None]
    wait = min(waits) if waits else None
    shortages = "".join(f"; pool {pool} has {free} of {wanted} replicas free" for pool, free, wanted in event.shortages)
    note = Note("info", f"persistent resource {event.name} is {event.state}{shortages}: waiting up to "
                        f"{wait or 'ever'} for capacity")
    return WaitForCapacity(position=position, step=step, location=location, name=event.name, wait=wait,
                           effects=(note, NoteWaiting(event.now)))


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
    by, why = (bound[0].timestamp(), bound[1]) if bound else (None, None)
    return WaitForJob(job_name=event.job_name, running_by=by, why=why, effects=(note, KeepBound(by, why)))


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
    if kind is Event.FAILED and event.paused:  # Google's SDKs take PAUSED as complete: we cancelled it
        return Fail(failure=Failure("TrainingJobFailedNoRetry", PAUSED_MESSAGE, name, said), effects=effects)
    if kind is Event.FAILED and event.timed_out and not earlier_try and not plan.retry_on_user_code_failure:
        # the service ended it at scheduling.timeout (FAILED, or CANCELLED: timeoutOutcome)
        return Fail(failure=Failure("TrainingJobTimedOut", "the training job ran out its scheduling.timeout "
                                    "(counted from its first RUNNING) and the service ended it: not a capacity "
                                    "problem, not resubmitted", name, said or event.message,
                                    log_tail=event.log_tail), effects=effects)
    if kind is Event.FAILED:  # the user's code (or a timeout): never resubmitted by the plan, never falls back
        if not (earlier_try and cleared):  # a clear trains anew whatever the failure was
            verdict = classify(plan.resubmit, said, event.log_tail)
            if verdict.kind == "hardware" and state.failure_resubmits < plan.resubmit.budget:
                return _resubmit(plan, state, event, verdict, effects, step, location)
            if verdict.kind == "hardware":  # the budget is spent: the user's failure, as below, saying so
                effects = (*effects, Note("warning", (
                    f"{name} failed with a hardware-shaped error ({verdict.why}), but max_failure_resubmits="
                    f"{plan.resubmit.budget} is spent ({state.failure_resubmits} resubmitted): not resubmitted")))
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


def _resubmit(plan: Plan, state: State, event: JobEnded, verdict: Verdict, effects: tuple[Effect, ...],
              step: Any, location: str) -> Action:
    """A FAILED job whose error a ``resubmit_on`` rule matched, with ``max_failure_resubmits`` left:
    a new job of the same step, from the same checkpoints; the closed attempt (the last effect) is
    marked with the rule, which is what the budget counts (the ledger's attempts)."""
    used, budget = state.failure_resubmits + 1, plan.resubmit.budget  # with this one
    note = Note("warning", f"{event.job_name} failed with a hardware-shaped error ({verdict.why}): resubmitting "
                           f"({used} of max_failure_resubmits={budget}), resuming from the checkpoints in "
                           f"{plan.checkpoints or '(no base_output_dir!)'}")
    effects = (*effects[:-1], replace(effects[-1], resubmit=verdict.rule), note)
    if isinstance(plan.at(state.position)[0], RaceStep):  # the race's winner again, as after a preemption
        return Submit(position=state.position, step=step, location=location, effects=effects)
    # the step from its start: the deadline, the budget and the step's reads apply to the new job too
    return _start(plan, state.position, event.now, effects)


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


def _then(plan: Plan, after: races.Next) -> Action:
    """A race decision's outcome at the plan's level: its action, or the plan's move it asked for."""
    if isinstance(after, races.FallBack):
        return _fall_back(plan, after.position, after.failure, after.now, after.effects)
    if isinstance(after, races.RunAgain):
        return _start(plan, after.position, after.now, after.effects)
    if isinstance(after, races.WinnerEnded):
        return _job_ended(plan, after.state, after.ended, earlier_try=False, effects=after.effects)
    return after
