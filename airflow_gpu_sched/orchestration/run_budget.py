"""A budget shared by the tasks of one DAG run (``RunBudget``), on what Airflow has: Variables.

Airflow has no compare-and-set a task can use (``Variable.set`` overwrites), so reservations
are **one Variable per task instance**, merged on read (as the observed-capacity history,
:mod:`.observed`), and decided by a rule every reader computes the same way:

- A task reserves by writing its own key ``<prefix>.<budget>.<run>.<task>.<map_index>`` with
  ``{"amount", "at"}``; ``at`` is stamped just before the write. No one else writes that key.
- Reservations are ordered by (``at``, key). A reservation **holds** when the amounts of *every*
  reservation before it that its writer sees, plus its own, fit in the limit (:func:`holding`).
  Counting refused or withdrawn ones too is on the safe side: whatever else a reader sees, the
  holders before the last holder are all in its sum, so the holders' total fits the limit.
- A writer decides only after :data:`SETTLE` has passed since its stamp, on a fresh read: any
  reservation ordered before it was written within ``SETTLE / 2`` of its stamp (a writer whose
  write returned later withdraws and tries again with a new stamp), so it is in that read. Hence
  two tasks never both hold money only one of them could: no double spend. (Assumed: worker
  clocks agree within ``SETTLE / 2``; the default settle is 10 s.)
- A retry of the same task instance finds its own key and keeps it (same stamp, same place in
  the order): a retry does not reserve twice. When the task ends it writes what was really
  spent into its key (``spent``), which frees the rest for reservations decided later. A task
  that ended and runs again (cleared after it succeeded) reserves anew on top of what it spent
  (``before``), with a new stamp; refused, its key goes back to what it spent.
- A withdrawn or refused reservation is deleted; a reader that still sees it counts it (on the
  safe side: less is handed out, never more).

:func:`holding` and :func:`left` are pure; :class:`VariableStore` is the I/O (Airflow Variables);
tests use any object with ``keys(prefix)``, ``get(key)``, ``set(key, value)``, ``delete(key)``.

May import: orchestration; airflow only inside functions.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

PREFIX = "gpu_sched_run_budget"
SETTLE = 10.0  # seconds between a reservation's stamp and its decision (twice the clock skew allowed)


class Store(Protocol):
    def keys(self, prefix: str) -> list[str]: ...
    def get(self, key: str) -> Any: ...
    def set(self, key: str, value: Any) -> None: ...
    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class RunBudget:
    """``RunBudget("gpu", 100.0)``: at most 100 (the price table's currency) on GPU jobs over all
    tasks of one DAG run that name this budget."""

    name: str
    limit: float
    settle: float = SETTLE  # seconds a reservation waits before it is decided (see above)


def _counted(value: dict[str, Any]) -> float:
    return float(value["spent"]) if value.get("spent") is not None else float(value["amount"])


def holding(reservations: dict[str, dict[str, Any]], limit: float) -> set[str]:
    """The keys whose reservation holds: in (at, key) order, those whose running sum of every
    reservation up to and including itself fits the limit."""
    held, total = set(), 0.0
    for key, value in sorted(reservations.items(), key=lambda kv: (float(kv[1]["at"]), kv[0])):
        total += _counted(value)
        if total <= limit + 1e-9:
            held.add(key)
    return held


def left(reservations: dict[str, dict[str, Any]], limit: float) -> float:
    """What the reservations seen have not taken (refused ones not yet deleted count: safe side)."""
    return limit - sum(_counted(v) for v in reservations.values())


def key_of(budget: RunBudget, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    run = hashlib.sha256(f"{dag_id}\0{run_id}".encode()).hexdigest()[:16]  # run ids hold ':' and '+'
    return f"{PREFIX}.{budget.name}.{run}.{task_id}.{map_index}"


def _run_prefix(key: str) -> str:
    return key.rsplit(".", 2)[0] + "."


def _read(store: Store, prefix: str) -> dict[str, dict[str, Any]]:
    found = {}
    for key in store.keys(prefix):
        value = store.get(key)
        if isinstance(value, dict) and "amount" in value and "at" in value:
            found[key] = value
    return found


def reserve(store: Store, budget: RunBudget, key: str, amount: float, clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep, settle: float = SETTLE, attempts: int = 5) -> bool:
    """Reserve ``amount`` of the run's budget under ``key`` (this task instance's); True when it
    holds. A retry finds its own reservation and keeps it."""
    prefix = _run_prefix(key)
    mine = store.get(key)
    if isinstance(mine, dict) and "at" in mine and mine.get("spent") is None:
        sleep(max(0.0, float(mine["at"]) + settle - clock()))
        return key in holding(_read(store, prefix), budget.limit)
    # a task that ended (``spent``) and runs again (cleared after it succeeded): what it spent stays
    # counted and the new run is a new reservation on top of it, decided as any other
    ended = mine if isinstance(mine, dict) and "at" in mine else None
    before = float(ended["spent"]) if ended else 0.0
    for _ in range(attempts):
        stamp = clock()
        store.set(key, {"amount": before + float(amount), "at": stamp, "before": before})
        if clock() - stamp > settle / 2:  # written too late to be seen by those deciding after us
            _withdraw(store, key, ended)
            continue
        sleep(max(0.0, stamp + settle - clock()))
        if key in holding(_read(store, prefix), budget.limit):
            return True
        _withdraw(store, key, ended)  # refused: frees nothing anyone held, and stops counting against later ones
        return False
    return False


def _withdraw(store: Store, key: str, ended: dict[str, Any] | None) -> None:
    """Take a reservation back; an ended task's earlier spending stays (its old place, its spent)."""
    if ended is None:
        store.delete(key)
    else:
        store.set(key, ended)


def settle_spent(store: Store, key: str, spent: float) -> None:
    """What the task really spent, into its own reservation (the rest is freed for later ones)."""
    mine = store.get(key)
    if isinstance(mine, dict) and "at" in mine:  # plus what its earlier runs spent (``before``)
        store.set(key, {**mine, "spent": float(mine.get("before") or 0.0) + float(spent)})


class VariableStore:
    """Airflow Variables as the store (the metadata DB, or a secrets backend's listing)."""

    def keys(self, prefix: str) -> list[str]:
        from airflow.sdk import Variable

        return [k for k in Variable.keys(prefix=prefix) if k.startswith(prefix)]

    def get(self, key: str) -> Any:
        from airflow.sdk import Variable

        return Variable.get(key, default=None, deserialize_json=True)

    def set(self, key: str, value: Any) -> None:
        from airflow.sdk import Variable

        Variable.set(key, value, serialize_json=True, description="airflow-gpu-sched: a run budget's reservation")

    def delete(self, key: str) -> None:
        from airflow.sdk import Variable

        Variable.delete(key)


__all__ = ["PREFIX", "SETTLE", "RunBudget", "VariableStore", "holding", "key_of", "left", "reserve", "settle_spent"]
