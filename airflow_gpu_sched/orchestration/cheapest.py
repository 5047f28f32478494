"""``region_order="cheapest"``'s decision: a step's regions by expected cost to finish before the
deadline, from the prices and the observed waits and preemptions per region (pure).

- Expected cost of a region: price per GPU-hour x run hours x (1 + half a run per expected
  preemption, :data:`budget.PREEMPTION_WASTE`); GPUs are the same in every region, so left out.
  A FLEX_START wait is free, so the wait does not add cost; it decides whether the job can
  still finish in time.
- Feasible: expected wait (the observed mean, a stockout counting as its wait plus
  :data:`observed.STOCKOUT_PENALTY`; a region never observed waits 0) + run time <= time left
  (no deadline: every region is feasible).
- Order: feasible regions first, cheapest first (an unknown price after the known ones); then
  the infeasible ones; ties and unknowns keep the order given. With neither prices nor history
  the order is the one given.

May import: orchestration; never airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_gpu_sched.orchestration import observed
from airflow_gpu_sched.orchestration.budget import PREEMPTION_WASTE


@dataclass(frozen=True)
class RegionCost:
    region: str
    price: float | None  # per GPU-hour (None: unknown)
    wait: float | None  # expected seconds before RUNNING (None: not observed)
    preemptions: float  # expected per run
    expected_cost: float | None  # per GPU (None: price unknown)
    feasible: bool

    def __str__(self) -> str:
        cost = "price unknown" if self.expected_cost is None else f"{self.expected_cost:.4g} per GPU"
        wait = "not observed" if self.wait is None else f"waits {self.wait:.0f}s"
        return f"{self.region}: {cost}, {wait}, {self.preemptions:.2g} preemption(s)" + \
            ("" if self.feasible else ", cannot finish in time")


def history_stats(regions: tuple[str, ...], accelerator: str, history: list[dict[str, Any]],
                  now: datetime) -> dict[str, tuple[float, float]]:
    """Per observed region: (mean wait in seconds, stockouts with their penalty; mean preemptions),
    over the same window as ``region_order="observed"`` (the last :data:`observed.PER_REGION`,
    none older than :data:`observed.MAX_AGE`)."""
    oldest = now - observed.MAX_AGE
    found = {}
    for region in regions:
        mine = [e for e in history if e.get("region") == region and e.get("accelerator") == accelerator
                and (at := observed.entry_at(e)) is not None and at >= oldest][-observed.PER_REGION:]
        if mine:
            waits = [float(e.get("waited") or 0.0) + observed.STOCKOUT_PENALTY if e.get("stockout")
                     else float(e.get("to_running") or 0.0) for e in mine]
            found[region] = (sum(waits) / len(waits), sum(int(e.get("preemptions") or 0) for e in mine) / len(mine))
    return found


def cheapest_order(regions: tuple[str, ...], prices: Mapping[str, float | None],
                   stats: Mapping[str, tuple[float, float]], run_seconds: float,
                   time_left: float | None = None) -> tuple[tuple[str, ...], tuple[RegionCost, ...]]:
    """``regions`` in the order to try them, and each one's inputs (for the log)."""
    costs = []
    for region in regions:
        price = prices.get(region)
        wait, preemptions = stats.get(region, (None, 0.0))
        cost = None if price is None else price * run_seconds / 3600 * (1 + PREEMPTION_WASTE * preemptions)
        feasible = time_left is None or (wait or 0.0) + run_seconds <= time_left
        costs.append(RegionCost(region, price, wait, preemptions, cost, feasible))
    ranked = sorted(range(len(regions)), key=lambda i: (not costs[i].feasible, costs[i].feasible and
                                                        costs[i].expected_cost is None,
                                                        (costs[i].expected_cost or 0.0) if costs[i].feasible else 0.0,
                                                        i))
    return tuple(regions[i] for i in ranked), tuple(costs[i] for i in ranked)


__all__ = ["RegionCost", "cheapest_order", "history_stats"]
