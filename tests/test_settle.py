"""A trigger in a triggerer holds an event that is ready within SETTLE_SECONDS of its start, so the
scheduler has drained the deferring try's executor report first (apache/airflow#66374: a stale
"success" processed after the task was re-queued fails the try). Inline (dag.test()) no wait."""

from __future__ import annotations

import time

import pytest
import requests

from airflow_gpu_sched.triggers import CustomJobTrigger, settle
from tests.test_triggers import _create, _first, _job


@pytest.mark.parametrize("started, now, wait", [
    (None, 5.0, 0.0),  # inline: dag.test() has no executor to race
    (100.0, 100.0, 30.0),  # ready at once: the whole settle time
    (100.0, 112.5, 17.5),
    (100.0, 130.0, 0.0),  # ready at the settle time
    (100.0, 4000.0, 0.0),  # a long training: no wait at all
])
def test_how_long_an_event_waits(started, now, wait):
    assert settle.settle_wait(started, now, 30.0) == wait


def test_only_a_trigger_the_triggerer_runs_has_a_start():
    trigger = CustomJobTrigger("projects/p/locations/l/customJobs/1")
    assert settle.started_at(trigger) is None  # dag.test() runs it inline: no trigger id
    trigger.trigger_id = 7  # what the triggerer sets when it loads the trigger
    assert settle.started_at(trigger) is not None


async def test_in_a_triggerer_an_early_event_waits_for_the_settle_time(fast_emulator, monkeypatch):
    monkeypatch.setattr(settle, "SETTLE_SECONDS", 1.5)
    name = _create(fast_emulator, _job())  # ends 0.41 s after its create at 100x
    trigger = CustomJobTrigger(name, poll_interval=0.05)
    trigger.trigger_id = 7
    began = time.monotonic()
    event = await _first(trigger)
    assert event["status"] == "succeeded" and time.monotonic() - began >= 1.5


async def test_inline_the_event_comes_as_soon_as_the_job_ends(fast_emulator, monkeypatch):
    monkeypatch.setattr(settle, "SETTLE_SECONDS", 3600.0)  # would time _first out if it applied
    name = _create(fast_emulator, _job())
    event = await _first(CustomJobTrigger(name, poll_interval=0.05))
    assert event["status"] == "succeeded"


async def test_in_a_triggerer_a_race_of_ended_members_waits_for_the_settle_time(fast_emulator, monkeypatch):
    """A retry re-attached to a race whose members an earlier try's on_kill already cancelled: the
    race decides at its first poll. Fired at once, the scheduler failed the try (CI, stop 28:
    tests/e2e/test_races.py clear-and-rerun, try 2 failed 4 s after its trigger fired)."""
    from airflow_gpu_sched.triggers import RaceTrigger
    from tests.test_races import EAST, _body, _create_in

    monkeypatch.setattr(settle, "SETTLE_SECONDS", 1.5)
    fast_emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", flex_start=0)
    names = [_create_in(fast_emulator, EAST, _body("FLEX_START")), _create_in(fast_emulator, EAST, _body("FLEX_START"))]
    for name in names:
        requests.post(f"{fast_emulator.url}/v1/{name}:cancel", json={}, timeout=10).raise_for_status()
    trigger = RaceTrigger(names, poll_interval=0.05)
    trigger.trigger_id = 7
    began = time.monotonic()
    event = await _first(trigger)
    assert event["status"] == "race_ended" and event["winner"] is None
    assert time.monotonic() - began >= 1.5


async def test_in_a_triggerer_free_replicas_at_the_first_read_wait_for_the_settle_time(fast_emulator, monkeypatch):
    """A persistent resource with free replicas at once (the e2e secret-variable test's pool, freed
    while the task deferred): fired within a second, the scheduler lost the resume (stop 28)."""
    from airflow_gpu_sched.triggers import PersistentCapacityTrigger
    from tests.conftest import with_a100_pool
    from tests.test_no_secret_in_events import PARENT, _spec

    monkeypatch.setattr(settle, "SETTLE_SECONDS", 1.5)
    fast_emulator.reset(with_a100_pool())
    spec = _spec()
    del spec["scheduling"]
    spec["workerPoolSpecs"] = spec["workerPoolSpecs"][:1]
    spec["persistentResourceId"] = "pool-a"
    trigger = PersistentCapacityTrigger(f"{PARENT}/persistentResources/pool-a", spec, time.time() + 60,
                                        poll_interval=0.05)
    trigger.trigger_id = 7
    began = time.monotonic()
    event = await _first(trigger)
    assert event["status"] == "capacity_available" and time.monotonic() - began >= 1.5
