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
from datetime import datetime, timedelta
from typing import Any

from airflow_gpu_sched.operators import running
from airflow_gpu_sched.orchestration.ledger import (DECISION_KEYS, HARDWARE_KEY, ORDERS_KEY, PREEMPTIONS_KEY, WAITS_KEY,
                                                   SubmissionLedger)

LEDGER_ORDERS = ORDERS_KEY  # step index -> its locations, in the order this run tries them (ledger.py writes it)
LEDGER_WAITS = WAITS_KEY  # step index -> {region: seconds}: max_wait_duration="observed"
LEDGER_PREEMPTIONS = PREEMPTIONS_KEY  # SPOT step index -> {region: per run}: the cost objective's
LEDGER_HARDWARE = HARDWARE_KEY  # given step index -> its hardware alternatives' order (operators/hardware_order.py)
DECIDED = DECISION_KEYS


def order_of(operator: Any, step: Any) -> str | None:
    """The step's own region_order, else the one its plan_objective implies."""
    from airflow_gpu_sched.orchestration.cheapest import OBJECTIVES

    own = getattr(step, "region_order", None)
    if own not in (None, "given"):
        return own
    return None if own == "given" else OBJECTIVES.get(getattr(operator, "plan_objective", None) or "")


def uses_observed(steps: list[Any], operator: Any = None) -> bool:
    """Does this plan read (and so record) the capacity history?"""
    return any(order_of(operator, step) in ("observed", "cheapest") or getattr(step, "observed_wait", None)
               for step in steps) or any(getattr(step, "hardware_order", None) in ("observed", "cheapest")
                                         for step in steps)


def apply(operator: Any, ledger: SubmissionLedger, context: Any = None) -> None:
    """Reorder ``operator.plan``'s observed/cheapest steps and set its learned waits and observed
    preemptions, as this training run decided (or decide now)."""
    steps = operator.plan
    if not uses_observed(steps, operator):
        return
    decided = ledger.run_decisions
    if decided is None:
        decided = _decide(operator, steps, ledger, context)
        ledger.keep_run_decisions(decided)
    operator.run_decisions = decided
    from airflow_gpu_sched.orchestration.hardware import reorder

    steps = reorder(steps, decided.get(LEDGER_HARDWARE))  # first: the other decisions are by the reordered index
    keys = (LEDGER_ORDERS, LEDGER_WAITS, LEDGER_PREEMPTIONS)
    operator.plan = [_decided(step, *(decided[key].get(str(i)) for key in keys)) for i, step in enumerate(steps)]


def _decided(step: Any, order: list[str] | None, waits: dict[str, float] | None,
             preemptions: dict[str, float] | None) -> Any:
    if order is not None and sorted(order) == sorted(step.locations):
        step = replace(step, locations=tuple(order))
    if waits and getattr(step, "observed_wait", None):
        step = replace(step, learned_waits=tuple((r, timedelta(seconds=float(w))) for r, w in waits.items()))
    if preemptions and step.strategy == "SPOT" and not hasattr(step, "members"):
        step = replace(step, observed_preemptions=tuple((r, float(p)) for r, p in preemptions.items()))
    return step


def keep(operator: Any, ledger: SubmissionLedger) -> None:
    """After the ledger starts a new training run (a clear after a failure): the positions this
    process already uses stay those of the run (the next return from the triggerer reads them)."""
    decided = getattr(operator, "run_decisions", None)
    if decided is not None:
        ledger.keep_run_decisions(decided)


def _decide(operator: Any, steps: list[Any], ledger: Any, context: Any) -> dict[str, dict[str, Any]]:
    from airflow_gpu_sched.orchestration import observed
    from airflow_gpu_sched.orchestration.cheapest import spot_preemptions

    now = running.now()  # the service's time: the deadline's, and the observations' own (record())
    history, problem = observed.read(now=now)
    if problem:
        operator.log.warning("could not read the capacity history (Variables %s*: %s): regions in the order given",
                             observed.VARIABLE, problem)
    from airflow_gpu_sched.operators import hardware_order
    from airflow_gpu_sched.orchestration.hardware import reorder

    deadline, run = _deadline_and_run(operator, ledger, context)
    hardware = hardware_order.decide(operator, steps, history, now, run.total_seconds() if run else None,
                                     None if deadline is None else (deadline - now).total_seconds())
    steps = reorder(steps, hardware)
    orders: dict[str, list[str]] = {}
    preemptions: dict[str, dict[str, float]] = {}
    for index, step in enumerate(steps):
        how = order_of(operator, step)
        if how not in ("observed", "cheapest") or hasattr(step, "members"):
            continue
        accelerator = accelerator_of(operator, step)
        if how == "cheapest" and step.strategy == "SPOT":  # the deadline and the budget count them
            regions = tuple(step.locations or (operator.location,))
            preemptions[str(index)] = spot_preemptions(regions, accelerator, history, now)
        if len(step.locations) < 2:
            continue
        if how == "cheapest":
            last = steps[-1] if index < len(steps) - 1 else None
            ranked, inputs = _cheapest(operator, step, accelerator, history, now, ledger, context, last)
        else:
            ranked, inputs = observed.order(tuple(step.locations), accelerator, history, now)
        orders[str(index)] = list(ranked)
        operator.log.info("plan[%d] %s: regions in the order %s for %s: %s (given: %s; %s)", index,
                          step.strategy, "of expected cost" if how == "cheapest" else "observed", accelerator,
                          ", ".join(ranked), ", ".join(step.locations), "; ".join(str(score) for score in inputs))
    ordered = [_decided(step, orders.get(str(i)), None, None) for i, step in enumerate(steps)]
    return {LEDGER_ORDERS: orders, LEDGER_WAITS: _waits(operator, ordered, history, now, ledger, context),
            LEDGER_PREEMPTIONS: preemptions, LEDGER_HARDWARE: hardware}


def _cheapest(operator: Any, step: Any, accelerator: str, history: list[dict[str, Any]], now: datetime,
              ledger: Any, context: Any, last: Any = None) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The step's regions by expected cost to finish before the deadline (orchestration/cheapest.py);
    ``last``: the plan's last step (a miss here pushes the night there), None for the last step."""
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
    fallback = estimate(budget, last, (last.locations or (operator.location,))[0]).price \
        if table and last is not None and not hasattr(last, "members") else None
    deadline, run = _deadline_and_run(operator, ledger, context)
    left = None if deadline is None else (deadline - now).total_seconds() + (0.0 if run else 3600.0)
    return cheapest_order(regions, prices, history_stats(regions, accelerator, history, now, step.strategy),
                          run.total_seconds() if run else 3600.0, left, fallback)


def _waits(operator: Any, steps: list[Any], history: list[dict[str, Any]], now: datetime, ledger: Any,
           context: Any) -> dict[str, dict[str, float]]:
    """max_wait_duration="observed": each region's learned wait, shared out of the deadline's slack
    when there is one (learned_wait.share_slack), logged with its inputs."""
    from airflow_gpu_sched.orchestration.learned_wait import learned_wait, reserve_of, share_slack
    from airflow_gpu_sched.orchestration.plans import positions

    waits: dict[str, dict[str, float]] = {}
    for index, step in enumerate(steps):
        if getattr(step, "observed_wait", None):
            accelerator = accelerator_of(operator, step)
            found = [learned_wait(history, region, accelerator, now, step.max_wait_duration)
                     for region in (step.locations or (operator.location,))]
            operator.log.info("plan[%d] FLEX_START: max_wait_duration observed for %s: %s", index, accelerator,
                              "; ".join(str(w) for w in found))
            waits[str(index)] = {w.region: w.wait.total_seconds() for w in found}
    deadline, run = _deadline_and_run(operator, ledger, context)
    if not waits or deadline is None or run is None or len(steps) < 2:
        return waits
    last = steps[-1]
    tried = [(i, region) for i, region in positions(steps, operator.location, operator.regions_first)
             if i != len(steps) - 1]
    reserve = reserve_of(history, (last.locations or (operator.location,))[0], accelerator_of(operator, last),
                         last.strategy, now)
    slack = (deadline - now - run - reserve).total_seconds()
    shared = share_slack([(waits[str(i)][region], True) if str(i) in waits else (_bound(steps[i]), False)
                          for i, region in tried], slack)
    for (i, region), seconds in zip(tried, shared):
        if str(i) in waits:
            waits[str(i)][region] = seconds
    operator.log.info("max_wait_duration observed, shared out of %.0fs before the deadline (less the run and "
                      "%s for plan[%d] %s to be RUNNING): %s", slack, reserve, len(steps) - 1, last.strategy,
                      {i: {r: round(w) for r, w in v.items()} for i, v in waits.items()})
    return waits


def _bound(step: Any) -> float | None:
    """How long a position that does not learn its wait may take before the plan moves on."""
    wait = step.capacity_wait_timeout
    if wait is None and step.strategy == "FLEX_START":
        wait = step.max_wait_duration or None
    return None if wait is None else wait.total_seconds()


def _deadline_and_run(operator: Any, ledger: Any, context: Any) -> tuple[datetime | None, timedelta | None]:
    run = operator.expected_run_time if isinstance(operator.expected_run_time, timedelta) else None
    known = context is not None or isinstance(operator.deadline, datetime)
    from airflow_gpu_sched.operators.running import deadline

    return (deadline(operator, context, ledger) if known else None), run


def accelerator_of(operator: Any, step: Any) -> str:
    demand = operator.build_job(step=step).job_spec.accelerator_demand()
    return next((accelerator.value for accelerator in demand), "CPU")


def record(operator: Any, attempt: dict[str, Any], preemptions: int) -> None:
    """An attempt that ended, as an observation of its region (plans that order by observation only)."""
    if not uses_observed(operator.plan, operator):
        return
    from airflow_gpu_sched.orchestration import observed

    now = running.now()
    entry = observed.observation(attempt, preemptions, now)
    if entry is None:
        return
    problem = observed.write(entry, now)
    if problem:
        operator.log.warning("capacity history, recording what %s showed (Variables %s*): %s", entry["region"],
                             observed.VARIABLE, problem)
