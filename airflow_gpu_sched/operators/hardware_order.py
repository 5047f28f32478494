"""``hardware_order="observed"|"cheapest"`` in the operator: the I/O around :mod:`orchestration.hardware_order`.

At the start of a training run (with the region orders, operators/region_order.py), each step
whose alternatives are ranked gets them in the order decided from the capacity history (and, for
``"cheapest"``, the price table); the order is kept in the submission ledger so every later try
sees the same positions. Logged with its inputs.

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_gpu_sched.orchestration.hardware import alternative, groups
from airflow_gpu_sched.orchestration.hardware_order import ORDERS, rank


def decide(operator: Any, steps: list[Any], history: list[dict[str, Any]], now: datetime,
           run_seconds: float | None, time_left: float | None) -> dict[str, list[int]]:
    """Given step index -> its alternatives' positions in the order to try them."""
    given = groups(steps)
    orders: dict[str, list[int]] = {}
    for index in dict.fromkeys(given):
        group = [s for s, g in zip(steps, given) if g == index]
        how = _order_of(operator, group[0])
        if how not in ORDERS or len(group) < 2 or not all(s.hardware for s in group):
            continue
        region = (group[0].locations or (operator.location,))[0]
        labels = tuple(str(s.hardware[0]) for s in group)
        accelerators = tuple(s.hardware[0].accelerator_type or "CPU" for s in group)
        prices = _prices(operator, group, labels, region) if how == "cheapest" else None
        order, inputs = rank(labels, accelerators, how, region, history, now, group[0].strategy, prices,
                             run_seconds or 3600.0, time_left)
        orders[str(index)] = [alternative(group[k]) for k in order]  # by the list given: reorder() is idempotent
        operator.log.info("plan[%d] %s: hardware in the order %s in %s: %s (given: %s; %s)", index, group[0].strategy,
                          "observed" if how == "observed" else "of expected cost", region,
                          ", ".join(labels[k] for k in order), ", ".join(labels), "; ".join(str(i) for i in inputs))
    return orders


def _order_of(operator: Any, step: Any) -> str | None:
    """The step's own hardware_order, else the one its plan_objective implies (as for regions)."""
    from airflow_gpu_sched.orchestration.cheapest import OBJECTIVES

    own = getattr(step, "hardware_order", None)
    if own not in (None, "given"):
        return own
    return None if own == "given" else OBJECTIVES.get(getattr(operator, "plan_objective", None) or "")


def _prices(operator: Any, group: list[Any], labels: tuple[str, ...], region: str) -> dict[str, float | None]:
    """Per alternative, the job's price per hour on it (its GPUs x the price table's per GPU-hour)."""
    from airflow_gpu_sched.orchestration.accounting import resolve_prices
    from airflow_gpu_sched.orchestration.catalog_prices import price_of

    try:
        table = resolve_prices(operator.prices, operator.client)
    except Exception as exc:  # noqa: BLE001 (no prices: ordered by waits alone, said)
        operator.log.warning("hardware_order=cheapest: no price table (%s: %s): waits and preemptions only",
                             type(exc).__name__, exc)
        return {}
    found: dict[str, float | None] = {}
    for label, step in zip(labels, group):
        total: float | None = 0.0
        for accelerator, gpus in operator.build_job(step=step).job_spec.accelerator_demand().items():
            price = price_of(table, accelerator.value, step.strategy, region) if table else None
            total = None if price is None or total is None else total + price * gpus
        found[label] = total
    return found
