"""The shared poller: many triggers in one loop, few API calls, clean exits, one back-off."""

from __future__ import annotations

import asyncio

import pytest

from airflow_gpu_sched.client import VertexClient
from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers import poller as poller_module
from tests.conftest import LOCATION, PROJECT

N = 40


def _create_jobs(emulator, count: int, run_seconds: int = 30) -> list[str]:
    body = {"displayName": "p", "labels": {"managed-by": "airflow-gpu-sched"}, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1",
                          "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]}}]}}
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        return [client.create_custom_job(body).name for _ in range(count)]


async def _all_events(triggers) -> list[dict]:
    async def first(trigger):
        async for event in trigger.run():
            return event.payload
    return await asyncio.wait_for(asyncio.gather(*(first(t) for t in triggers)), 60)


@pytest.mark.parametrize("polling", ["batched", "per_job"])
async def test_every_trigger_gets_its_event(fast_emulator, polling):
    names = _create_jobs(fast_emulator, N)
    events = await _all_events([CustomJobTrigger(n, poll_interval=0.1, polling=polling) for n in names])
    assert [e["job"]["name"] for e in events] == names
    assert all(e["status"] == "succeeded" for e in events)


async def test_batched_polling_makes_a_fraction_of_the_calls(fast_emulator):
    names = _create_jobs(fast_emulator, N)
    await _all_events([CustomJobTrigger(n, poll_interval=0.1) for n in names])
    requests = fast_emulator.stats()["requests"]
    batched = requests.get("customJobs.list", 0) + requests.get("customJobs.get", 0)
    fast_emulator.reset({**__import__("tests.conftest").conftest.FAST})
    names = _create_jobs(fast_emulator, N)
    await _all_events([CustomJobTrigger(n, poll_interval=0.1, polling="per_job") for n in names])
    per_job = fast_emulator.stats()["requests"]["customJobs.get"]
    assert batched * 5 < per_job, (batched, per_job)


async def test_the_poller_stops_when_its_last_watcher_leaves(fast_emulator):
    names = _create_jobs(fast_emulator, 3, run_seconds=100_000)
    tasks = [asyncio.create_task(_all_events([CustomJobTrigger(n, poll_interval=0.05)])) for n in names]
    await asyncio.sleep(0.3)
    (poller,) = list(poller_module._POLLERS.values())
    assert set(poller._watchers) == set(names)
    tasks[0].cancel()  # a trigger cancelled (or moved to another triggerer) leaves cleanly
    await asyncio.gather(tasks[0], return_exceptions=True)
    assert set(poller._watchers) == set(names[1:])
    for task in tasks[1:]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert poller_module._POLLERS == {} and poller._task is None
    calls = fast_emulator.stats()["requests"]
    await asyncio.sleep(0.3)
    assert fast_emulator.stats()["requests"] == calls  # nothing polls any more


async def test_an_outage_backs_off_the_poller_once_for_everyone(fast_emulator):
    names = _create_jobs(fast_emulator, N, run_seconds=100_000)
    fast_emulator.set_faults(error_rate=1.0, status_codes=[503])
    events = await _all_events([CustomJobTrigger(n, poll_interval=0.05, transient_error_window=1.5) for n in names])
    assert all(e["status"] == "error" and "unreachable" in e["message"] for e in events)
    # one shared poll (a list plus the client's brief retries) per interval, with back-off: not N of them
    assert fast_emulator.stats()["requests"]["customJobs.list"] < 60
