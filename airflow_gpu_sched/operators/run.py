"""The run loop of a training task: decide, carry the action out, feed what came of it back as
the next event, until the plan succeeds or fails. A deferral (``op.defer``) ends the loop; the
``execute_*`` entry point the trigger names starts it again with the trigger's event.

Two tables, races included: the engine's action type -> the handler that carries it out (and
answers with the next event, and the job it ended with), the effect type -> the handler that
applies it. A new action or effect is one row here and its handler; nothing else dispatches on
their types.

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import TYPE_CHECKING, Any, Callable

from airflow_gpu_sched.operators import events, lineage, observe, region_order, vertex_calls
from airflow_gpu_sched.operators.running import deadline, now, try_number
from airflow_gpu_sched.orchestration import signals, stops
from airflow_gpu_sched.orchestration.errors import (
    BudgetExceeded,
    CapacityUnavailable,
    CapacityWaitExpired,
    DeadlineExceeded,
    GpuTrainingError,
    InvalidTrainingSpec,
    PersistentCapacityTimeout,
    PersistentResourceUnavailable,
    PreemptionBudgetExhausted,
    QuotaTooLow,
    TrainingJobCancelled,
    TrainingJobFailed,
    TrainingJobFailedNoRetry,
    TrainingJobTimedOut,
    VertexUnreachable,
)

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.ledger import SubmissionLedger


# The typed errors, by the name the plan's decisions give them (plan_engine returns no exception).
ERRORS: dict[str, type[GpuTrainingError]] = {cls.__name__: cls for cls in (
    TrainingJobFailed, TrainingJobFailedNoRetry, TrainingJobTimedOut, TrainingJobCancelled, CapacityWaitExpired,
    PreemptionBudgetExhausted,
    PersistentResourceUnavailable, PersistentCapacityTimeout, CapacityUnavailable, QuotaTooLow, DeadlineExceeded,
    VertexUnreachable, BudgetExceeded)}


@dataclass(frozen=True)
class Finished:
    """The plan succeeded: the task's result."""

    result: Any


def run(op: Any, context: Any, ledger: SubmissionLedger, event: Any, ended: Any = None) -> Any:
    op.try_key = stops.key_of(context)  # what on_kill stops (orchestration/stops.py)
    op.run_ledger = ledger  # one ledger for the whole loop (wait_for_job reads the bound from it)
    try:
        return _loop(op, context, ledger, event, ended)
    except stops.TryStopped as exc:  # Airflow's own "terminated": failed, not retried, as a kill is
        from airflow_gpu_sched import compat

        op.log.warning("%s", exc)
        raise compat.AirflowTaskTerminated(str(exc)) from None


def _loop(op: Any, context: Any, ledger: SubmissionLedger, event: Any, ended: Any) -> Any:
    from airflow_gpu_sched.orchestration import plan_engine as engine

    plan = engine_plan(op, context, ledger)
    while True:
        action = engine.decide(plan, engine.State.of(ledger.snapshot()), event)
        # a try told to stop acts on nothing it learns after: no create, no move, no failure read
        # from the end of a job it cancelled itself (on_kill)
        stops.check(op.try_key, f"acting on what came after ({type(action).__name__})")
        for effect in action.effects:
            effects()[type(effect)](op, context, ledger, effect, ended)
        if action.starts_new_run:
            # a new training run: its budget is its own (a run budget reserves anew on top of what
            # the run given up spent), so its first step is decided again with that budget
            plan, ended = engine_plan(op, context, ledger), None
            action = engine.decide(plan, engine.State.of(ledger.snapshot()),
                                   engine.TryStarted(now=now(), try_number=try_number(context)))
            for effect in action.effects:
                effects()[type(effect)](op, context, ledger, effect, ended)
        out = actions()[type(action)](op, context, ledger, action, ended)
        if isinstance(out, Finished):
            return out.result
        event, ended = out


@contextmanager
def vertex_reachable() -> Iterator[None]:
    """Calls that still fail after the client's retries (bounded by the transient-error
    window) fail the task as :class:`VertexUnreachable`, naming the last error."""
    from airflow_gpu_sched.vertex.client import QuotaExceededError, ServerError, VertexTransportError

    try:
        yield
    except (ServerError, QuotaExceededError, VertexTransportError) as exc:
        raise VertexUnreachable(f"Vertex AI unreachable: {exc}") from exc


def engine_plan(op: Any, context: Any, ledger: SubmissionLedger) -> engine.Plan:
    """The engine's view of the operator's plan (its deadline anchored, its budget read)."""
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.budget import budget_for

    return engine.Plan.of(op.plan, op.location, op.regions_first, project=op.project_id,
                          deadline=deadline(op, context, ledger), expected_run_time=op.expected_run_time,
                          quota_preflight=op.quota_preflight, checkpoints=op.base_output_dir,
                          retry_on_user_code_failure=op.retry_on_user_code_failure,
                          budget=budget_for(op, ledger, context), resubmit=op.resubmit)


# ---------------------------------------------------------------------------------------- actions


def _succeed(op: Any, context: Any, ledger: SubmissionLedger, action: engine.Succeed, ended: Any) -> Finished:
    result = observe.summary(op, ledger, ended.kind.outputs(ended.resource) if ended else None)
    lineage.task_succeeded(op, context, result)  # the outlets' Asset events
    return Finished(result)


def _fail(op: Any, context: Any, ledger: SubmissionLedger, action: engine.Fail, ended: Any) -> None:
    from airflow_gpu_sched.operators import failed_try  # its record reads accounting: loaded when a task fails

    failure = action.failure  # kept: a later try tells a retry from a clear by it
    ledger.note_failure(failure.kind, failure.message, failure.job_name, failure.detail, try_number(context))
    failed_try.push(op, context, ledger, failure)  # where the UI plugin reads a failed try
    if failure.kind == "InvalidTrainingSpec":
        raise InvalidTrainingSpec(list(failure.violations), failure.message)
    raise ERRORS[failure.kind](failure.message, failure.job_name, failure.detail, log_tail=failure.log_tail)


def _read_quota(op: Any, context: Any, ledger: SubmissionLedger, action: engine.ReadQuota, ended: Any) -> Any:
    return vertex_calls.read_quota(op, action.step, action.location), None


def _read_resource(op: Any, context: Any, ledger: SubmissionLedger, action: engine.ReadResource, ended: Any) -> Any:
    return vertex_calls.read_resource(op, context, action), None


def _read_reservation(op: Any, context: Any, ledger: SubmissionLedger, action: engine.ReadReservation,
                      ended: Any) -> Any:
    return vertex_calls.read_reservation(op, context, action), None


def _submit(op: Any, context: Any, ledger: SubmissionLedger, action: engine.Submit, ended: Any) -> Any:
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.vertex.client import QuotaExceededError

    try:
        name = submit(op, context, ledger, action.step, action.location, action.max_wait)
    except QuotaExceededError as exc:
        if not exc.is_resource_quota:  # a request-rate limit past the window: not a capacity outcome
            raise
        return engine.CreateRefused(now=now(), message=exc.message, text=str(exc)), None
    return engine.Created(now=now(), job_name=name), None


def submit(op: Any, context: Any, ledger: SubmissionLedger, step: Any, location: str, max_wait: Any = None) -> str:
    """Create the job under the ledger's submission key (a new one if none), reconciling an
    ambiguous create by that key's label; the name is saved before anything else."""
    from airflow_gpu_sched.operators.unrecorded import record_or_cancel

    from airflow_gpu_sched.operators.reattach import position_label

    key = ledger.submission_key or ledger.new_submission()
    job = op.validated_job(context, key, step, max_wait)
    # its plan position on the job too: a retry on an Airflow that keeps no ledger finds it by labels
    job = job.model_copy(update={"labels": {**(job.labels or {}), **position_label(ledger.position)}})
    created = vertex_calls.create(op, job, key, location, job.display_name)
    record_or_cancel(op.log, lambda: ledger.record_job(created.name, try_number(context)),
                     lambda: vertex_calls.cancel(op, created.name), created.name)
    op.running_job = created.name
    observe.job_created(context, created.name, step.resource_id)
    return created.name


def _wait_for_job(op: Any, context: Any, ledger: SubmissionLedger, action: engine.WaitForJob, ended: Any) -> Any:
    return events.job_event(op, context, op.wait_for_job(context, action.job_name))


def _re_attach(op: Any, context: Any, ledger: SubmissionLedger, action: engine.ReAttach, ended: Any) -> Any:
    return events.job_event(op, context, op.wait_for_job(context, action.job_name))


def _wait_for_capacity(op: Any, context: Any, ledger: SubmissionLedger, action: engine.WaitForCapacity,
                       ended: Any) -> Any:
    spec = op.validated_job(context, step=action.step).job_spec.to_api()
    return events.capacity_event(op.wait_for_capacity(context, action.name, spec, action.wait)), None


@cache
def actions() -> dict[type, Callable[..., Any]]:
    from airflow_gpu_sched.operators import race
    from airflow_gpu_sched.orchestration import plan_engine as engine

    return {engine.Succeed: _succeed, engine.Fail: _fail, engine.ReadQuota: _read_quota,
            engine.ReadResource: _read_resource, engine.ReadReservation: _read_reservation, engine.Submit: _submit,
            engine.WaitForJob: _wait_for_job, engine.ReAttach: _re_attach, engine.WaitForCapacity: _wait_for_capacity,
            engine.ReadRaceQuotas: race.read_quotas, engine.SubmitRace: race.submit, engine.WaitForRace: race.wait}


# ---------------------------------------------------------------------------------------- effects


def _note(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.Note, ended: Any) -> None:
    getattr(op.log, effect.level)(effect.text)


def _close(op: Any, context: Any, ledger: SubmissionLedger, close: engine.Close, ended: Any) -> None:
    from airflow_gpu_sched.orchestration.accounting import attempt_record, no_job_record

    where = {"position": close.position, "location": close.location}
    if close.job_name is None:  # the attempt never got a job
        from airflow_gpu_sched.orchestration.hardware import no_job_fields

        record = no_job_record(close.strategy, close.state or "", close.waited, close.error, **where,
                               **no_job_fields(op.plan[op.positions()[close.position][0]]))
        ledger.finish_attempt(record)
        observe.no_job_closed(op, record)
        return
    assert ended is not None, "a job's attempt is closed with the resource it ended as"
    job = ended.kind.view(ended.resource)
    gpu_hours = ended.kind.gpu_hours(ended.resource)
    record = attempt_record(job, close.strategy, close.outcome, close.restarts, gpu_hours, ended.observed)
    record.update(where)
    if ledger.race:
        from airflow_gpu_sched.operators import race

        race.mark_winner(ledger, record)
    if close.state:
        record.update(state=close.state, error=close.error)
    if close.resubmit:  # resubmitted for a hardware-shaped failure: counted (orchestration/resubmit.py)
        record["resubmit"] = close.resubmit
    ledger.finish_attempt(record, close.preemptions, completed=close.completed, try_number=try_number(context))
    observe.attempt_closed(op, record, close.preemptions, f"{job.name} ended {job.state.value}")


def _new_run(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.NewRun, ended: Any) -> None:
    from airflow_gpu_sched.orchestration.accounting import resolve_prices
    from airflow_gpu_sched.orchestration.budget import settle_run_budget

    # run_budget=: the run given up (cleared after a failure) spent real money: into its reservation
    # first, so the new run reserves on top of it instead of re-using it (no double spend)
    settle_run_budget(ledger, resolve_prices(op.prices, op.client))
    ledger.new_run()
    region_order.keep(op, ledger)  # the order this run's positions were decided in


def _rewind(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.Rewind, ended: Any) -> None:
    ledger.move_to(0)


def _move(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.Move, ended: Any) -> None:
    op.log.warning(effect.text)
    signals.fell_back(op, effect.record())
    ledger.move_to(effect.dst)


def _keep_bound(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.KeepBound, ended: Any) -> None:
    ledger.set_running_bound(effect.by, effect.why)  # kept across tries: a retry re-attaches with it


def _note_waiting(op: Any, context: Any, ledger: SubmissionLedger, effect: engine.NoteWaiting, ended: Any) -> None:
    ledger.note_waiting_since(effect.since)


@cache
def effects() -> dict[type, Callable[..., None]]:
    from airflow_gpu_sched.operators import race
    from airflow_gpu_sched.orchestration import plan_engine as engine

    return {engine.Note: _note, engine.Close: _close, engine.NewRun: _new_run, engine.Rewind: _rewind,
            engine.Move: _move, engine.KeepBound: _keep_bound, engine.NoteWaiting: _note_waiting,
            engine.CloseMember: race.close_member, engine.Won: race.won}
