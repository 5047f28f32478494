"""``hardware_order``: a step's hardware alternatives tried as its regions are, pure.

``"given"`` (or None): in the order listed. ``"observed"``: by the capacity this installation
observed for each alternative's accelerator in the step's first region (:func:`observed.order`'s
score: the recent wait to RUNNING, stockouts and preemptions). ``"cheapest"``: by expected cost to
finish (:func:`cheapest.cheapest_order` over the alternatives: the whole job's price per hour on
each, its observed wait, preemptions and share of jobs that got their GPUs); nothing observed
yet: the order given. Decided once at the start of a training run and kept in the submission
ledger with the region orders (operators/region_order.py), so every try sees the same positions.
To race alternatives instead, list one race member per alternative.

May import: orchestration; never airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_gpu_sched.orchestration import observed
from airflow_gpu_sched.orchestration.cheapest import cheapest_order, history_stats

ORDERS = ("observed", "cheapest")  # the orders decided from the history (the rest: as given)


def rank(labels: tuple[str, ...], accelerators: tuple[str, ...], how: str, region: str,
         history: list[dict[str, Any]], now: datetime, strategy: str | None = None,
         prices: Mapping[str, float | None] | None = None, run_seconds: float = 3600.0,
         time_left: float | None = None) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """The alternatives' positions in the order to try them, and each one's inputs (for the log).
    ``labels``: one per alternative (how the log names it); ``prices``: per label, the job's price
    per hour on it (None: unknown)."""
    if how == "observed":
        scores = [observed.order((region,), accelerator, history, now)[1][0] for accelerator in accelerators]
        ranked = sorted(range(len(labels)), key=lambda i: (scores[i].score, i))  # ties: the order given
        return tuple(ranked), tuple(_named(scores[i], labels[i]) for i in ranked)
    stats = {}
    for label, accelerator in zip(labels, accelerators):
        found = history_stats((region,), accelerator, history, now, strategy)
        if region in found:
            stats[label] = found[region]
    order, costs = cheapest_order(labels, dict(prices or {}), stats, run_seconds, time_left)
    return tuple(labels.index(label) for label in order), costs


def _named(score: Any, label: str) -> str:
    return f"{label}: " + str(score).split(": ", 1)[-1]
