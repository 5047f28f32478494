"""``region_order="cheapest"``'s decision: a step's regions by expected cost to finish before the
deadline, from the prices and the observed waits and preemptions per region (pure).

- Expected cost of a region: price per GPU-hour x run hours x (1 + half a run per expected
  preemption, :data:`budget.PREEMPTION_WASTE`) / the share of its recent jobs that reached
  RUNNING (the cost per run delivered: a cheap region that often has no capacity is not cheap;
  at least :data:`MIN_DELIVERED`); GPUs are the same in every region, so left out.
  With the price of the plan's last resort (``fallback``: its last step, e.g. STANDARD, when this
  step is not the last), a night is one try, not a retry until delivered: a region that delivers
  a share ``d`` costs ``d`` x its run + ``(1 - d)`` x the last resort's run (the night pushed
  there). So a cheap region that rarely has capacity is weighed by what its misses really cost.
  A FLEX_START wait is free, so the wait does not add cost; it decides whether the job can
  still finish in time.
- Feasible: expected wait (the observed mean, a stockout counting as its wait plus
  :data:`observed.STOCKOUT_PENALTY`; a region never observed waits 0) + run time (with the
  same preemption waste) <= time left
  (no deadline: every region is feasible).
- Order: feasible regions first, cheapest first (an unknown price after the known ones); then
  the infeasible ones; ties and unknowns keep the order given. With no history for any of the
  step's regions the order is the one given (prices alone do not say where capacity is: the
  user's order is their knowledge until this installation has its own).

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


MIN_DELIVERED = 0.05  # a region that never delivered lately costs 20 runs, not infinity (it may come back)
SPOT_PRIOR_PREEMPTIONS = 1.0  # per run, a SPOT region never observed (assumed: a deadline must not be optimistic)

OBJECTIVES = {"cost": "cheapest", "time": "observed"}  # plan_objective -> the region order of steps without one


def check_objective(value: Any) -> list[str]:
    """``plan_objective`` rule, naming the field."""
    if value is None or value in OBJECTIVES:
        return []
    return [f"plan_objective: must be one of {', '.join(OBJECTIVES)} or None (got {value!r})"]


def spot_preemptions(regions: tuple[str, ...], accelerator: str, history: list[dict[str, Any]],
                     now: datetime) -> dict[str, float]:
    """Per region, the preemptions a SPOT run is expected to take: the mean of the SPOT runs
    observed there (as :func:`history_stats` windows them), else the prior."""
    spot = [e for e in history if e.get("strategy") == "SPOT" and not e.get("stockout")]
    stats = history_stats(regions, accelerator, spot, now)
    return {region: stats[region][1] if region in stats else SPOT_PRIOR_PREEMPTIONS for region in regions}


def history_stats(regions: tuple[str, ...], accelerator: str, history: list[dict[str, Any]],
                  now: datetime, strategy: str | None = None) -> dict[str, tuple[float, ...]]:
    """Per observed region: (mean wait in seconds, stockouts with their penalty; mean preemptions;
    the share of jobs that reached RUNNING),
    over the same window as ``region_order="observed"`` (the last :data:`observed.PER_REGION`,
    none older than :data:`observed.MAX_AGE`). With ``strategy``: that strategy's jobs only, when
    the region has any (the step's own capacity: STANDARD jobs that always start at once say
    nothing about the FLEX_START queue there, as in ``learned_wait.samples``)."""
    oldest = now - observed.MAX_AGE
    found = {}
    for region in regions:
        mine = [e for e in history if e.get("region") == region and e.get("accelerator") == accelerator
                and (at := observed.entry_at(e)) is not None and at >= oldest]
        own = [e for e in mine if e.get("strategy") == strategy]
        mine = (own or mine)[-observed.PER_REGION:]
        if mine:
            waits = [float(e.get("waited") or 0.0) + observed.STOCKOUT_PENALTY if e.get("stockout")
                     else float(e.get("to_running") or 0.0) for e in mine]
            found[region] = (sum(waits) / len(waits), sum(int(e.get("preemptions") or 0) for e in mine) / len(mine),
                             sum(1 for e in mine if not e.get("stockout")) / len(mine))
    return found


def cheapest_order(regions: tuple[str, ...], prices: Mapping[str, float | None],
                   stats: Mapping[str, tuple[float, ...]], run_seconds: float,
                   time_left: float | None = None,
                   fallback: float | None = None) -> tuple[tuple[str, ...], tuple[RegionCost, ...]]:
    """``regions`` in the order to try them, and each one's inputs (for the log). ``stats``: per
    region (mean wait, mean preemptions[, share of jobs that reached RUNNING]); ``fallback``: the
    last resort's price per GPU-hour (None: unknown, or this is the last step)."""
    costs = []
    for region in regions:
        price = prices.get(region)
        wait, preemptions, delivered = (*stats.get(region, (None, 0.0)), 1.0)[:3]
        run = price * run_seconds / 3600 * (1 + PREEMPTION_WASTE * preemptions) if price is not None else None
        if run is None:
            cost = None
        elif fallback is not None:  # one try a night: a miss is the last resort's run
            share = min(1.0, max(0.0, delivered))
            cost = share * run + (1 - share) * fallback * run_seconds / 3600
        else:
            cost = run / max(delivered, MIN_DELIVERED)
        running = run_seconds * (1 + PREEMPTION_WASTE * preemptions)  # each preemption: half a run again
        feasible = time_left is None or (wait or 0.0) + running <= time_left
        costs.append(RegionCost(region, price, wait, preemptions, cost, feasible))
    if not any(region in stats for region in regions):
        return tuple(regions), tuple(costs)  # nothing observed yet: the user's order
    ranked = sorted(range(len(regions)), key=lambda i: (not costs[i].feasible, costs[i].feasible and
                                                        costs[i].expected_cost is None,
                                                        (costs[i].expected_cost or 0.0) if costs[i].feasible else 0.0,
                                                        i))
    return tuple(regions[i] for i in ranked), tuple(costs[i] for i in ranked)


__all__ = ["SPOT_PRIOR_PREEMPTIONS", "RegionCost", "cheapest_order", "history_stats", "spot_preemptions"]
