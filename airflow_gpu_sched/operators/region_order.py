"""``region_order="observed"`` in the operator: the I/O around :mod:`orchestration.observed`.

At the start of a training run, each step that orders its regions by observation gets them
sorted (:func:`observed.order`) and the order is kept in the submission ledger, so every later
try and every return from the triggerer sees the same positions (a re-attach must find the
region its job is in). Each attempt that ends is recorded in the history (:func:`record`).
``region_order="cheapest"`` (:mod:`orchestration.cheapest`) and ``plan_objective="cost"|"time"``
(every step without its own region_order: cheapest / observed) are decided here the same way, and
so are the learned FLEX_START waits of ``max_wait_duration="observed"`` (:mod:`orchestration.learned_wait`,
kept in the ledger per step and region).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_gpu_sched.orchestration.ledger import SubmissionLedger

LEDGER_ORDERS = "region_orders"  # step index -> its locations, in the order this run tries them
LEDGER_WAITS = "learned_waits"  # step index -> {region: seconds}: max_wait_duration="observed"
OBJECTIVES = {"cost": "cheapest", "time": "observed"}  # plan_objective -> the region order of steps without one


def order_of(operator: Any, step: Any) -> str | None:
    """The step's own region_order, else the one its plan_objective implies."""
    own = getattr(step, "region_order", None)
    if own not in (None, "given"):
        return own
    return None if own == "given" else OBJECTIVES.get(getattr(operator, "plan_objective", None) or "")


def uses_observed(steps: list[Any], operator: Any = None) -> bool:
    """Does this plan read (and so record) the capacity history?"""
    return any(order_of(operator, step) in ("observed", "cheapest") or getattr(step, "observed_wait", None)
               for step in steps)


def check_objective(value: Any) -> list[str]:
    """``plan_objective`` rule, naming the field."""
    if value is None or value in OBJECTIVES:
        return []
    return [f"plan_objective: must be one of {', '.join(OBJECTIVES)} or None (got {value!r})"]


def apply(operator: Any, ledger: SubmissionLedger, context: Any = None) -> None:
    """Reorder ``operator.plan``'s observed/cheapest steps and set its learned waits, as this
    training run decided (or decide now)."""
    steps = operator.plan
    if not uses_observed(steps, operator):
        return
    saved = ledger.data.get(LEDGER_ORDERS)
    if saved is None:
        saved, waits = _decide(operator, steps, ledger, context)
        ledger.data[LEDGER_ORDERS], ledger.data[LEDGER_WAITS] = saved, waits
        ledger.save()
    waits = ledger.data.get(LEDGER_WAITS) or {}
    operator._region_orders, operator._learned_waits = saved, waits
    operator.plan = [_decided(step, saved.get(str(i)), waits.get(str(i))) for i, step in enumerate(steps)]


def _decided(step: Any, order: list[str] | None, waits: dict[str, float] | None) -> Any:
    if order is not None and sorted(order) == sorted(step.locations):
        step = replace(step, locations=tuple(order))
    if waits and getattr(step, "observed_wait", None):
        step = replace(step, learned_waits=tuple((r, timedelta(seconds=float(w))) for r, w in waits.items()))
    return step


def keep(operator: Any, ledger: SubmissionLedger) -> None:
    """After the ledger starts a new training run (a clear after a failure): the positions this
    process already uses stay those of the run (the next return from the triggerer reads them)."""
    orders = getattr(operator, "_region_orders", None)
    if orders is not None:
        ledger.data[LEDGER_ORDERS] = orders
        ledger.data[LEDGER_WAITS] = getattr(operator, "_learned_waits", None) or {}
        ledger.save()


def _decide(operator: Any, steps: list[Any], ledger: Any, context: Any) -> tuple[dict[str, list[str]],
                                                                                 dict[str, dict[str, float]]]:
    from airflow_gpu_sched.orchestration import observed

    now = datetime.now(timezone.utc)
    history, problem = observed.read()
    if problem:
        operator.log.warning("could not read the capacity history (Variables %s*: %s): regions in the order given",
                             observed.VARIABLE, problem)
    orders: dict[str, list[str]] = {}
    waits: dict[str, dict[str, float]] = {}
    for index, step in enumerate(steps):
        how = order_of(operator, step)
        if getattr(step, "observed_wait", None):
            waits[str(index)] = _waits(operator, index, step, history, now)
        if how not in ("observed", "cheapest") or len(step.locations) < 2 or hasattr(step, "members"):
            continue
        accelerator = accelerator_of(operator, step)
        if how == "cheapest":
            ranked, inputs = _cheapest(operator, step, accelerator, history, now, ledger, context)
        else:
            ranked, inputs = observed.order(tuple(step.locations), accelerator, history, now)
        orders[str(index)] = list(ranked)
        operator.log.info("plan[%d] %s: regions in the order %s for %s: %s (given: %s; %s)", index,
                          step.strategy, "of expected cost" if how == "cheapest" else "observed", accelerator,
                          ", ".join(ranked), ", ".join(step.locations), "; ".join(str(score) for score in inputs))
    return orders, waits


def _cheapest(operator: Any, step: Any, accelerator: str, history: list[dict[str, Any]], now: datetime,
              ledger: Any, context: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The step's regions by expected cost to finish before the deadline (orchestration/cheapest.py)."""
    from airflow_gpu_sched.orchestration.accounting import resolve_prices
    from airflow_gpu_sched.orchestration.budget import Budget, estimate
    from airflow_gpu_sched.orchestration.cheapest import cheapest_order, history_stats

    regions = tuple(step.locations)
    try:
        table = resolve_prices(operator.prices, operator.client)
    except Exception as exc:  # noqa: BLE001 (no prices: the order by waits alone, said)
        operator.log.warning("region_order=cheapest: no price table (%s: %s): waits and preemptions only",
                             type(exc).__name__, exc)
        table = None
    demand = operator.build_job(step=step).job_spec.accelerator_demand()
    budget = Budget(remaining=None, prices=table, demand=tuple((getattr(a, "value", str(a)), n) for a, n in demand.items()))
    prices = {region: estimate(budget, step, region).price for region in regions} if table else {}
    run = operator.expected_run_time if isinstance(operator.expected_run_time, timedelta) else None
    deadline = operator._deadline(context, ledger) if context is not None or isinstance(operator.deadline, datetime) \
        else None
    left = None if deadline is None else (deadline - now).total_seconds() + (0.0 if run else 3600.0)
    return cheapest_order(regions, prices, history_stats(regions, accelerator, history, now),
                          run.total_seconds() if run else 3600.0, left)


def _waits(operator: Any, index: int, step: Any, history: list[dict[str, Any]], now: datetime) -> dict[str, float]:
    """max_wait_duration="observed": each region's learned wait, logged with its inputs."""
    from airflow_gpu_sched.orchestration.learned_wait import learned_wait

    accelerator = accelerator_of(operator, step)
    found = [learned_wait(history, region, accelerator, now, step.max_wait_duration)
             for region in (step.locations or (operator.location,))]
    operator.log.info("plan[%d] FLEX_START: max_wait_duration observed for %s (the deadline may clip it): %s",
                      index, accelerator, "; ".join(str(w) for w in found))
    return {w.region: w.wait.total_seconds() for w in found}


def accelerator_of(operator: Any, step: Any) -> str:
    demand = operator.build_job(step=step).job_spec.accelerator_demand()
    return next((accelerator.value for accelerator in demand), "CPU")


def record(operator: Any, attempt: dict[str, Any], preemptions: int) -> None:
    """An attempt that ended, as an observation of its region (plans that order by observation only)."""
    if not uses_observed(operator.plan, operator):
        return
    from airflow_gpu_sched.orchestration import observed

    now = datetime.now(timezone.utc)
    entry = observed.observation(attempt, preemptions, now)
    if entry is None:
        return
    problem = observed.write(entry, now)
    if problem:
        operator.log.warning("capacity history, recording what %s showed (Variables %s*): %s", entry["region"],
                             observed.VARIABLE, problem)
