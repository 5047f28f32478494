"""A user's kill cancels the job even when Vertex answers the cancel 429 or 5xx: the cancel is
retried (bounded by triggers.job.ON_KILL_CANCEL_BUDGET, inside Airflow's on_kill_timeout), and a
cancel that never got through is an error naming the job, not a bare traceback. At the wire:
the emulator's injected faults answer the cancel requests."""

from __future__ import annotations

import asyncio

import requests

from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers import job as job_module
from tests.test_triggers import _create, _job


async def _until(predicate, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout  # a hang guard
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def test_a_cancel_answered_429_and_503_is_retried_until_it_lands(fast_emulator):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    fast_emulator.set_faults(error_rate=1.0, status_codes=[429, 503])
    kill = asyncio.ensure_future(CustomJobTrigger(name, poll_interval=0.05).on_kill())
    # the service refuses the cancel three times, then takes it
    await _until(lambda: fast_emulator.stats()["faultsInjected"] >= 3 or kill.done(), "no cancel was sent")
    assert not kill.done(), kill  # still retrying, not given up
    fast_emulator.clear_faults()
    await kill
    stats = fast_emulator.stats()
    assert stats["cancels"] == 1 and stats["requests"]["customJobs.cancel"] >= 4, stats
    state = requests.get(f"{fast_emulator.url}/v1/{name}", timeout=5).json()["state"]
    assert state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"), state


async def test_a_cancel_that_never_lands_is_an_error_naming_the_job(fast_emulator, monkeypatch, capfd):
    monkeypatch.setattr(job_module, "ON_KILL_CANCEL_BUDGET", 1.0)  # the budget, short for the test
    name = _create(fast_emulator, _job(run_seconds=10_000))
    fast_emulator.set_faults(error_rate=1.0, status_codes=[503])
    await CustomJobTrigger(name, poll_interval=0.05).on_kill()  # returns: no traceback for Airflow to log
    stats = fast_emulator.stats()
    assert stats["cancels"] == 0 and stats["requests"]["customJobs.cancel"] >= 2, stats  # retried, then gave up
    out = capfd.readouterr()
    errors = [line for line in (out.out + out.err).splitlines() if "error" in line]  # the trigger's log (structlog)
    assert any(f"could not cancel {name}" in line and "jobs orphans --cancel" in line for line in errors), errors
