"""A budget shared by the tasks of one DAG run (orchestration/run_budget.py): one Variable-like
key per task instance, merged on read; tested here with concurrent threads on an in-memory store
that interleaves reads and writes; the deployed test (Airflow Variables under concurrent mapped
tasks, a retry, a clear) is tests/e2e/test_budget.py."""

from __future__ import annotations

import random
import threading
import time

import pytest

from airflow_gpu_sched.orchestration.run_budget import (
    RunBudget,
    holding,
    key_of,
    left,
    reserve,
    settle_spent,
)
from tests.test_observed_history import history  # noqa: F401 (fixture: the Task SDK's Variables, in process)

BUDGET = RunBudget("gpu", 100.0)


class SlowStore:
    """Keys and JSON-able values, each call after a random pause: reads and writes interleave."""

    def __init__(self, seed: int):
        self.data: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.rng = random.Random(seed)

    def _pause(self) -> None:
        with self.lock:
            pause = self.rng.random() * 0.01
        time.sleep(pause)

    def keys(self, prefix):
        self._pause()
        with self.lock:
            return [k for k in self.data if k.startswith(prefix)]

    def get(self, key):
        self._pause()
        with self.lock:
            value = self.data.get(key)
            return dict(value) if value is not None else None

    def set(self, key, value):
        self._pause()
        with self.lock:
            self.data[key] = dict(value)

    def delete(self, key):
        self._pause()
        with self.lock:
            self.data.pop(key, None)

    def data_view(self) -> dict[str, dict]:
        with self.lock:
            return {k: dict(v) for k, v in self.data.items()}


def test_holding_is_the_running_sum_in_stamp_order():
    found = {"a": {"amount": 60, "at": 1.0}, "b": {"amount": 50, "at": 2.0}, "c": {"amount": 40, "at": 3.0}}
    assert holding(found, 100) == {"a"}  # b does not fit, and (safe side) c counts b too
    found["a"]["spent"] = 10  # a spent less than it reserved: the rest is free for later ones
    assert holding(found, 100) == {"a", "b", "c"} and left(found, 100) == 0


@pytest.mark.parametrize("seed", range(5))
def test_concurrent_tasks_never_hold_more_than_the_budget(seed):
    store = SlowStore(seed)
    results: dict[str, bool] = {}
    amounts = {f"t{i}": 30.0 for i in range(8)}  # 240 asked, 100 to share: at most 3 may hold

    def task(task_id: str) -> None:
        key = key_of(BUDGET, "nightly", "scheduled__2026-12-01", task_id)
        results[task_id] = reserve(store, BUDGET, key, amounts[task_id], settle=1.0)

    threads = [threading.Thread(target=task, args=(t,)) for t in amounts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [t for t, ok in results.items() if ok]
    assert sum(amounts[t] for t in held) <= BUDGET.limit  # no double spend
    assert 1 <= len(held) <= 3 and len(store.data) == len(held)  # the refused deleted their keys
    assert {k.rsplit(".", 2)[1] for k in store.data} == set(held)


def test_a_retry_keeps_its_reservation_and_does_not_reserve_twice():
    store = SlowStore(1)
    key = key_of(BUDGET, "nightly", "run-1", "train")
    assert reserve(store, BUDGET, key, 70.0, settle=0.05)
    stamp = store.data[key]["at"]
    assert reserve(store, BUDGET, key, 70.0, settle=0.05)  # the retry: same key, same place in the order
    assert store.data[key]["at"] == stamp and len(store.data) == 1
    other = key_of(BUDGET, "nightly", "run-1", "evaluate")
    assert not reserve(store, BUDGET, other, 40.0, settle=0.05)  # 70 + 40 > 100
    settle_spent(store, key, 20.0)  # the first task ended having spent 20
    assert reserve(store, BUDGET, other, 40.0, settle=0.05)


def test_another_run_has_its_own_budget():
    store = SlowStore(2)
    assert reserve(store, BUDGET, key_of(BUDGET, "nightly", "run-1", "train"), 90.0, settle=0.05)
    assert reserve(store, BUDGET, key_of(BUDGET, "nightly", "run-2", "train"), 90.0, settle=0.05)


def test_a_write_that_returned_too_late_is_withdrawn_and_retried():
    store = SlowStore(3)
    now = [0.0]
    calls = []

    def clock() -> float:
        calls.append(now[0])
        if len(calls) == 2:  # after the first write: it took longer than settle / 2
            now[0] += 10
        return now[0]

    assert reserve(store, BUDGET, key_of(BUDGET, "d", "r", "t"), 10.0, clock=clock, sleep=lambda s: None,
                   settle=4.0)
    [value] = store.data.values()
    assert value["at"] == 10.0  # the second stamp: the late one was withdrawn


# ------------------------------------------------------------------ through Airflow's Variables

def _clean_variables() -> None:
    from sqlalchemy import select

    from airflow.models import Variable as DbVariable
    from airflow.utils.session import create_session

    from airflow_gpu_sched.orchestration.run_budget import PREFIX

    with create_session() as session:
        keys = list(session.scalars(select(DbVariable.key).where(DbVariable.key.startswith(PREFIX))))
    for key in keys:
        DbVariable.delete(key)


def test_concurrent_tasks_through_the_task_sdks_variables_never_hold_more_than_the_budget(history):
    """Threads that each talk to the real in-process Execution API and metadata DB as a task
    would (tests/test_observed_history.py's harness): every one has read before any writes."""
    from airflow_gpu_sched.orchestration.run_budget import VariableStore

    _clean_variables()
    install = history
    install(writers=6)
    store = VariableStore()
    results: dict[str, bool] = {}

    def task(task_id: str) -> None:
        key = key_of(BUDGET, "nightly", "scheduled__2026-12-01T00:00:00+00:00", task_id)
        results[task_id] = reserve(store, BUDGET, key, 40.0, settle=2.0)

    threads = [threading.Thread(target=task, args=(f"train_{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    held = [t for t, ok in results.items() if ok]
    assert len(results) == 6 and 1 <= len(held) <= 2  # 6 x 40 asked, 100 to share
    run_prefix = key_of(BUDGET, "nightly", "scheduled__2026-12-01T00:00:00+00:00", "x").rsplit(".", 2)[0] + "."
    assert sorted(k.rsplit(".", 2)[1] for k in store.keys(run_prefix)) == sorted(held)
    _clean_variables()


def test_each_map_index_reserves_under_its_own_key():
    """Map index 0 had the key of index -1 (``map_index or -1``): found by tests/e2e/test_budget.py."""
    from types import SimpleNamespace

    from airflow_gpu_sched.orchestration.budget import task_key

    op = SimpleNamespace(dag_id="nightly", task_id="train")
    keys = [task_key(BUDGET, op, {"run_id": "r", "ti": SimpleNamespace(map_index=i)}) for i in (-1, 0, 1)]
    assert [k.rsplit(".", 1)[1] for k in keys] == ["-1", "0", "1"]
    assert task_key(BUDGET, op, {"run_id": "r"}) == keys[0]  # no task instance: unmapped


def test_a_task_cleared_after_it_ended_reserves_anew_on_top_of_what_it_spent():
    """Its key said ``spent``: kept as it was, the new run's money was counted nowhere and the
    rest its first run freed (held by another task since) was spent twice."""
    store = SlowStore(4)
    key = key_of(BUDGET, "nightly", "run-1", "train")
    assert reserve(store, BUDGET, key, 60.0, settle=0.05)
    settle_spent(store, key, 50.0)  # the task succeeded having spent 50: 50 left for the others
    other = key_of(BUDGET, "nightly", "run-1", "evaluate")
    assert reserve(store, BUDGET, other, 40.0, settle=0.05)  # 50 + 40 fits
    assert not reserve(store, BUDGET, key, 60.0, settle=0.05)  # cleared: 50 spent + 60 more does not fit
    assert store.data[key]["spent"] == 50.0 and left(store.data_view(), 100) == 10.0
    assert reserve(store, BUDGET, key, 10.0, settle=0.05)  # 50 + 40 + 10: fits
    settle_spent(store, key, 8.0)  # its second run spent 8: both runs' spending stays counted
    assert store.data[key]["spent"] == 58.0 and left(store.data_view(), 100) == 2.0
