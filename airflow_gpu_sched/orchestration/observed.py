"""Regions ordered by the capacity this installation observed there: ``region_order="observed"``.

Every attempt of a plan that orders a step so is one observation (region, accelerator, when,
whether the job reached RUNNING and how long that took, a stockout, preemptions), appended to a
bounded history in the metadata DB through one Airflow Variable (:data:`VARIABLE`, JSON: the
last :data:`MAX_ENTRIES` observations, none older than :data:`MAX_AGE`). When a training run
starts, such a step's locations are sorted by :func:`order`: per region, the mean cost of its last
:data:`PER_REGION` observations for the job's accelerator, where a job that reached RUNNING
costs its seconds to RUNNING, one that did not (stockout, capacity wait expired, quota refused,
cancelled by a bound) costs the seconds it waited plus :data:`STOCKOUT_PENALTY`, and each
preemption adds :data:`PREEMPTION_PENALTY`. A region never observed counts as
:data:`UNOBSERVED` (half a stockout: after regions that gave capacity, before those that did
not, so it gets tried); ties keep the order given. The order and its inputs are logged.

The decisions (:func:`observation`, :func:`add`, :func:`order`) are pure; :func:`read` and
:func:`write` are the Variable's I/O, and never fail a task (a warning, then the order given).

May import: vertex, orchestration; airflow only inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

VARIABLE = "gpu_sched_observed_capacity"
MAX_ENTRIES = 500  # the whole history, all regions and accelerators
PER_REGION = 10  # observations per (region, accelerator) that count: the last nights
MAX_AGE = timedelta(days=30)
STOCKOUT_PENALTY = 4 * 3600.0  # seconds: a region that gave no capacity costs at least a long wait
PREEMPTION_PENALTY = 1800.0  # seconds of lost progress and restarts per preemption
UNOBSERVED = STOCKOUT_PENALTY / 2
CAPACITY_MISSES = frozenset({"capacity_timeout", "preempted", "quota_exceeded"})  # outcomes.Event values


def observation(record: dict[str, Any], preemptions: int, now: datetime) -> dict[str, Any] | None:
    """One attempt record (accounting's, with ``location``) as an observation; None when it says
    nothing about capacity (the user's code failed before anything was learned, no region)."""
    region = record.get("location")
    if not region:
        return None
    ran = record.get("running_since") is not None  # seen RUNNING, never startTime (set at admission)
    outcome = record.get("outcome")
    if not ran and outcome not in CAPACITY_MISSES:
        return None  # e.g. cancelled by a user before it started: not the region's doing
    return {"region": region, "accelerator": record.get("accelerator_type") or "CPU",
            "strategy": record.get("strategy"), "at": now.isoformat(),
            "to_running": round(float(record.get("queued_seconds") or 0.0), 1) if ran else None,
            "waited": round(float(record.get("queued_seconds") or 0.0), 1),
            "stockout": not ran, "preemptions": int(preemptions) if ran else 0}  # a stockout is no preemption


def add(history: list[dict[str, Any]], entry: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
    """The history with ``entry`` appended, bounded in age and count."""
    oldest = now - MAX_AGE
    kept = [e for e in history if _at(e) is not None and _at(e) >= oldest]  # type: ignore[operator]
    return [*kept, entry][-MAX_ENTRIES:]


def cost(entry: dict[str, Any]) -> float:
    base = (float(entry.get("waited") or 0.0) + STOCKOUT_PENALTY) if entry.get("stockout") \
        else float(entry.get("to_running") or 0.0)
    return base + PREEMPTION_PENALTY * int(entry.get("preemptions") or 0)


@dataclass(frozen=True)
class RegionScore:
    region: str
    score: float
    observations: int
    stockouts: int
    preemptions: int
    median_to_running: float | None

    def __str__(self) -> str:
        if not self.observations:
            return f"{self.region}: not observed (counts {self.score:.0f}s)"
        to_running = "never RUNNING" if self.median_to_running is None else \
            f"median {self.median_to_running:.0f}s to RUNNING"
        return (f"{self.region}: {self.score:.0f}s over the last {self.observations} ({to_running}, "
                f"{self.stockouts} stockout(s), {self.preemptions} preemption(s))")


def order(regions: tuple[str, ...], accelerator: str, history: list[dict[str, Any]],
          now: datetime) -> tuple[tuple[str, ...], tuple[RegionScore, ...]]:
    """``regions`` sorted by their recent cost for ``accelerator`` (lowest first), and the inputs."""
    oldest = now - MAX_AGE
    scores = []
    for region in regions:
        mine = [e for e in history if e.get("region") == region and e.get("accelerator") == accelerator
                and _at(e) is not None and _at(e) >= oldest][-PER_REGION:]  # type: ignore[operator]
        ran = sorted(float(e["to_running"]) for e in mine if e.get("to_running") is not None)
        scores.append(RegionScore(
            region, sum(cost(e) for e in mine) / len(mine) if mine else UNOBSERVED, len(mine),
            sum(1 for e in mine if e.get("stockout")), sum(int(e.get("preemptions") or 0) for e in mine),
            ran[len(ran) // 2] if ran else None))
    ranked = sorted(range(len(regions)), key=lambda i: (scores[i].score, i))  # ties: the order given
    return tuple(regions[i] for i in ranked), tuple(scores[i] for i in ranked)


def _at(entry: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(entry["at"])
    except (KeyError, TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------ the Variable (I/O)


def read(name: str = VARIABLE) -> tuple[list[dict[str, Any]], str | None]:
    """The history, and why it could not be read (then empty)."""
    from airflow.sdk import Variable

    try:
        value = Variable.get(name, default=None, deserialize_json=True)
    except Exception as exc:  # a missing or unreadable Variable must not fail training
        return [], f"{type(exc).__name__}: {exc}"
    if value is None:
        return [], None
    if not isinstance(value, list):
        return [], f"Variable {name} is not a JSON list"
    return [e for e in value if isinstance(e, dict)], None


def write(entry: dict[str, Any], now: datetime, name: str = VARIABLE) -> str | None:
    """Append ``entry``; why it could not be written, or None. (Read-modify-write: two tasks ending
    at the same instant may lose one observation, which only makes the order a little staler.)"""
    from airflow.sdk import Variable

    history, problem = read(name)
    if problem:
        return problem
    try:
        Variable.set(name, add(history, entry, now), serialize_json=True,
                     description="airflow-gpu-sched: capacity observed per region and accelerator "
                                 "(region_order='observed')")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
