"""``region_order="observed"`` in the operator: the I/O around :mod:`orchestration.observed`.

At the start of a training run, each step that orders its regions by observation gets them
sorted (:func:`observed.order`) and the order is kept in the submission ledger, so every later
try and every return from the triggerer sees the same positions (a re-attach must find the
region its job is in). Each attempt that ends is recorded in the history (:func:`record`).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from airflow_gpu_sched.orchestration.ledger import ORDERS_KEY, SubmissionLedger

LEDGER_ORDERS = ORDERS_KEY  # step index -> its locations, in the order this run tries them (ledger.py writes it)


def uses_observed(steps: list[Any]) -> bool:
    return any(getattr(step, "region_order", None) == "observed" for step in steps)


def apply(operator: Any, ledger: SubmissionLedger) -> None:
    """Reorder ``operator.plan``'s observed steps, as this training run decided (or decide now)."""
    steps = operator.plan
    if not uses_observed(steps):
        return
    saved = ledger.region_orders
    if saved is None:
        saved = _decide(operator, steps)
        ledger.keep_region_orders(saved)
    operator.region_orders = saved
    operator.plan = [replace(step, locations=tuple(saved[str(i)]))
                     if str(i) in saved and sorted(saved[str(i)]) == sorted(step.locations) else step
                     for i, step in enumerate(steps)]


def keep(operator: Any, ledger: SubmissionLedger) -> None:
    """After the ledger starts a new training run (a clear after a failure): the positions this
    process already uses stay those of the run (the next return from the triggerer reads them)."""
    orders = getattr(operator, "region_orders", None)
    if orders is not None:
        ledger.keep_region_orders(orders)


def _decide(operator: Any, steps: list[Any]) -> dict[str, list[str]]:
    from airflow_gpu_sched.orchestration import observed

    now = datetime.now(timezone.utc)
    history, problem = observed.read()
    if problem:
        operator.log.warning("could not read the capacity history (Variables %s*: %s): regions in the order given",
                             observed.VARIABLE, problem)
    orders = {}
    for index, step in enumerate(steps):
        if getattr(step, "region_order", None) != "observed" or len(step.locations) < 2:
            continue
        accelerator = accelerator_of(operator, step)
        ranked, inputs = observed.order(tuple(step.locations), accelerator, history, now)
        orders[str(index)] = list(ranked)
        operator.log.info("plan[%d] %s: regions in the order observed for %s: %s (given: %s; %s)", index,
                          step.strategy, accelerator, ", ".join(ranked), ", ".join(step.locations),
                          "; ".join(str(score) for score in inputs))
    return orders


def accelerator_of(operator: Any, step: Any) -> str:
    demand = operator.build_job(step=step).job_spec.accelerator_demand()
    return next((accelerator.value for accelerator in demand), "CPU")


def record(operator: Any, attempt: dict[str, Any], preemptions: int) -> None:
    """An attempt that ended, as an observation of its region (plans that order by observation only)."""
    if not uses_observed(operator.plan):
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
