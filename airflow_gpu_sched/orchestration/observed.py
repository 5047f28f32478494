"""Regions ordered by the capacity this installation observed there: ``region_order="observed"``.

Every attempt of a plan that orders a step so is one observation (region, accelerator, when,
whether the job reached RUNNING and how long that took, a stockout, preemptions), kept in the
metadata DB as Airflow Variables under the prefix :data:`VARIABLE`: one new key per observation,
merged on read (so attempts ending together lose nothing), compacted into one new key when there
are more than :data:`COMPACT_AT`; the history is the last :data:`MAX_ENTRIES` observations, none
older than :data:`MAX_AGE`. When a training run
starts, such a step's locations are sorted by :func:`order`: per region, the mean cost of its last
:data:`PER_REGION` observations for the job's accelerator, where a job that reached RUNNING
costs its seconds to RUNNING, one that did not (stockout, capacity wait expired, quota refused,
cancelled by a bound) costs the seconds it waited plus :data:`STOCKOUT_PENALTY`, and each
preemption adds :data:`PREEMPTION_PENALTY`. A region never observed counts as
:data:`UNOBSERVED` (half a stockout: after regions that gave capacity, before those that did
not, so it gets tried); ties keep the order given. The order and its inputs are logged.

The decisions (:func:`observation`, :func:`add`, :func:`merge`, :func:`order`) are pure;
:func:`read`, :func:`write` and :func:`compact` are the Variables' I/O, and never fail a task
(a warning, then the order given).

May import: vertex, orchestration; airflow only inside functions.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

VARIABLE = "gpu_sched_observed_capacity"  # the keys' prefix; the key itself: the list earlier versions rewrote
OBSERVATION, CHUNK = "o", "c"  # VARIABLE.o.<when>.<id>: one observation; VARIABLE.c.<when>.<id>: merged ones
COMPACT_AT = 20  # keys (a read costs one call each) beyond which a recorder merges them into one
DESCRIPTION = "airflow-gpu-sched: capacity observed per region and accelerator (region_order='observed')"
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
    return bound([*history, entry], now)


def bound(history: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The last :data:`MAX_ENTRIES` entries none older than :data:`MAX_AGE` (or unreadable)."""
    oldest = now - MAX_AGE
    kept = [e for e in history if entry_at(e) is not None and entry_at(e) >= oldest]  # type: ignore[operator]
    return kept[-MAX_ENTRIES:]


def merge(values: list[Any], now: datetime) -> list[dict[str, Any]]:
    """The stored values (the legacy list, single observations, chunks) as one history: each
    observation once (by its id; an entry of the legacy list by its content), oldest first, bounded."""
    by_id: dict[str, dict[str, Any]] = {}
    for value in values:
        for entry in value if isinstance(value, list) else [value]:
            if isinstance(entry, dict) and entry_at(entry) is not None:
                by_id.setdefault(entry_id(entry), entry)
    ordered = sorted(by_id.values(), key=lambda e: (entry_at(e), entry_id(e)))  # type: ignore[arg-type,return-value]
    return bound(ordered, now)


def entry_id(entry: dict[str, Any]) -> str:
    if isinstance(entry.get("id"), str):
        return entry["id"]
    return "legacy-" + hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()[:24]


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
                and entry_at(e) is not None and entry_at(e) >= oldest][-PER_REGION:]  # type: ignore[operator]
        ran = sorted(float(e["to_running"]) for e in mine if e.get("to_running") is not None)
        scores.append(RegionScore(
            region, sum(cost(e) for e in mine) / len(mine) if mine else UNOBSERVED, len(mine),
            sum(1 for e in mine if e.get("stockout")), sum(int(e.get("preemptions") or 0) for e in mine),
            ran[len(ran) // 2] if ran else None))
    ranked = sorted(range(len(regions)), key=lambda i: (scores[i].score, i))  # ties: the order given
    return tuple(regions[i] for i in ranked), tuple(scores[i] for i in ranked)


def entry_at(entry: dict[str, Any]) -> datetime | None:
    """When a history entry was recorded (None: no readable ``at``)."""
    try:
        return datetime.fromisoformat(entry["at"])
    except (KeyError, TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------ the Variables (I/O)
# Airflow 3 task code reaches the metadata DB only through the Task SDK (the API server), whose
# Variables have get/set/delete/keys(prefix) and no compare-and-swap, so a shared list rewritten by
# every attempt loses one of two attempts ending together. Instead each observation is a Variable of
# its own under a new key (an insert that nothing else writes: no update can be lost) and the history
# is merged on read. XCom would not do: it is per task instance, cleared on retry, and cannot be read
# across DAGs from a task. So the keys stay few, a recorder that sees more than COMPACT_AT merges what
# it read into one new chunk (again a new key) and only then deletes the keys it read: every
# observation is in some key at every instant, so concurrent compactions lose nothing (duplicates
# are dropped on read by id).


def _keys(name: str) -> list[str]:
    from airflow.sdk import Variable

    mine = [key for key in Variable.keys(prefix=name) if key.startswith(name + ".")]
    return [name, *sorted(mine)]  # the legacy list first (a secrets backend's is not listed)


def _load(name: str, keys: list[str]) -> tuple[list[Any], list[str], list[str]]:
    """The values of ``keys``, the keys actually read, and what could not be read."""
    from airflow.sdk import Variable

    values, read_keys, problems = [], [], []
    for key in keys:
        try:
            value = Variable.get(key, default=None, deserialize_json=True)
        except Exception as exc:  # one unreadable key costs its observations, not the order
            problems.append(f"{key}: {type(exc).__name__}: {exc}")
            continue
        if value is None:
            continue  # absent, or deleted by a compaction since the listing: it is in a newer chunk
        if key == name and not isinstance(value, list):
            problems.append(f"Variable {name} is not a JSON list")
            continue
        values.append(value)
        read_keys.append(key)
    return values, read_keys, problems


def read(name: str = VARIABLE, now: datetime | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The history (merged from all keys, bounded), and why (some of) it could not be read."""
    try:
        keys = _keys(name)
    except Exception as exc:  # a missing or unreadable history must not fail training
        return [], f"{type(exc).__name__}: {exc}"
    values, _, problems = _load(name, keys)
    return merge(values, now or datetime.now(timezone.utc)), "; ".join(problems) or None


def write(entry: dict[str, Any], now: datetime, name: str = VARIABLE) -> str | None:
    """Record ``entry`` under a key of its own, then compact if the keys grew; why it could not be
    written, or None. Once the first ``set`` returned the observation is kept (a failed compaction
    only leaves more keys to read)."""
    from airflow.sdk import Variable

    entry = {**entry, "id": uuid.uuid4().hex}
    try:
        Variable.set(f"{name}.{OBSERVATION}.{now:%Y%m%dT%H%M%S}.{entry['id']}", entry, serialize_json=True,
                     description=DESCRIPTION)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        compact(name, now)
    except Exception as exc:
        return f"recorded; compaction failed: {type(exc).__name__}: {exc}"
    return None


def compact(name: str, now: datetime) -> bool:
    """Merge the history's keys into one new chunk once there are more than :data:`COMPACT_AT`."""
    from airflow.sdk import Variable

    keys = _keys(name)
    if len(keys) <= COMPACT_AT:
        return False
    values, read_keys, _ = _load(name, keys)
    history = merge(values, now)
    if history:
        Variable.set(f"{name}.{CHUNK}.{now:%Y%m%dT%H%M%S}.{uuid.uuid4().hex}", history, serialize_json=True,
                     description=DESCRIPTION)
    for key in read_keys:  # only now: what they held is in the chunk just written (or pruned)
        try:
            Variable.delete(key)
        except Exception:  # e.g. a concurrent compaction deleted it first: it is merged either way
            continue
    return True
