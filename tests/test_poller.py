"""The shared poller: many triggers in one loop, few API calls, clean exits, one back-off."""

from __future__ import annotations

import asyncio

import pytest

from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers import poller as poller_module
from airflow_gpu_sched.vertex.client import VertexClient
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
    # jobs of 3 real seconds, 30 poll intervals: with 0.3 s ones (4 intervals) a loaded machine
    # (load 12, two make checks side by side) starved the per-job loop to ~3 GETs a job, and the
    # batched poller's 35 calls were more than a fifth of its 117
    names = _create_jobs(fast_emulator, N, run_seconds=300)
    await _all_events([CustomJobTrigger(n, poll_interval=0.1) for n in names])
    requests = fast_emulator.stats()["requests"]
    batched = requests.get("customJobs.list", 0) + requests.get("customJobs.get", 0)
    fast_emulator.reset({**__import__("tests.conftest").conftest.FAST})
    names = _create_jobs(fast_emulator, N, run_seconds=300)
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


# --- the poll as Vertex allows it: documented filter fields only, readMask, ended jobs found cheaply


async def _watched(emulator, names: list[str]):
    """A poller watching ``names`` with a long interval: its loop polls once (every watcher hears
    of its job), then the test drives ``poll_once`` itself, with the emulator's clock."""
    from airflow_gpu_sched.vertex.client import AsyncVertexClient

    async def factory():
        return AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)

    poller = poller_module.shared_poller(("test", PROJECT, LOCATION), factory)
    watchers = [poller.watch(n, 3600.0) for n in names]
    first = [await asyncio.wait_for(w.next(), 30) for w in watchers]
    return poller, watchers, first


def _calls(emulator) -> tuple[int, int]:
    requests = emulator.stats()["requests"]
    return requests.get("customJobs.list", 0), requests.get("customJobs.get", 0)


def _leave(poller, watchers) -> None:
    for watcher in watchers:
        poller.unwatch(watcher)


def test_the_emulator_refuses_the_old_update_time_filter(emulator):
    """The guard that would have caught the old poll: Vertex lists have no update_time filter."""
    from airflow_gpu_sched.vertex.client import InvalidArgumentError

    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        with pytest.raises(InvalidArgumentError) as info:
            list(client.list_custom_jobs(filter='labels.managed-by="airflow-gpu-sched" AND '
                                                'update_time>="2026-11-30T00:00:00Z"'))
    assert "update_time" in str(info.value) and "display_name, state, create_time" in str(info.value)


async def test_a_waiting_job_is_read_through_the_mask_and_its_end_in_full(emulator):
    (name,) = _create_jobs(emulator, 1, run_seconds=30)
    poller, watchers, first = await _watched(emulator, [name])
    try:
        assert not first[0].is_terminal()
        assert first[0].job_spec.worker_pool_specs == []  # the active list's readMask leaves the spec out
        assert first[0].create_time is not None and first[0].update_time is not None
        emulator.advance(120)  # the job ends between two polls
        lists, gets = _calls(emulator)
        await poller.poll_once()  # would raise InvalidArgumentError on any filter field Vertex lacks
        (final,) = [await asyncio.wait_for(w.next(), 5) for w in watchers]
        assert final.state.value == "JOB_STATE_SUCCEEDED"
        assert final.job_spec.worker_pool_specs[0].machine_spec.machine_type == "n1-standard-4"  # read in full
        assert _calls(emulator) == (lists + 1, gets + 1)  # one list of active jobs, one GET for the ended one
    finally:
        _leave(poller, watchers)


async def test_many_jobs_ending_in_one_interval_cost_one_list_of_ended_jobs(emulator):
    names = _create_jobs(emulator, poller_module.FEW_MISSING + 3, run_seconds=30)
    poller, watchers, _ = await _watched(emulator, names)
    try:
        emulator.advance(120)
        lists, gets = _calls(emulator)
        await poller.poll_once()
        finals = [await asyncio.wait_for(w.next(), 5) for w in watchers]
        assert [f.name for f in finals] == names and all(f.state.value == "JOB_STATE_SUCCEEDED" for f in finals)
        # the final event carries what the operator reads (the pools, for GPU-hours) from that list too
        assert all(f.job_spec.worker_pool_specs for f in finals)
        assert _calls(emulator) == (lists + 2, gets)  # active jobs, ended jobs: no GET per job
    finally:
        _leave(poller, watchers)


async def test_a_few_jobs_ending_are_fetched_alone_and_the_others_keep_waiting(emulator):
    short = _create_jobs(emulator, 2, run_seconds=30)
    long = _create_jobs(emulator, 3, run_seconds=100_000)
    poller, watchers, _ = await _watched(emulator, short + long)
    try:
        emulator.advance(120)
        lists, gets = _calls(emulator)
        await poller.poll_once()
        finals = [await asyncio.wait_for(w.next(), 5) for w in watchers[:2]]
        assert all(f.state.value == "JOB_STATE_SUCCEEDED" for f in finals)
        assert _calls(emulator) == (lists + 1, gets + 2)
        running = [await asyncio.wait_for(w.next(), 5) for w in watchers[2:]]  # QUEUED -> RUNNING: told
        assert all(r.state.value == "JOB_STATE_RUNNING" for r in running)
        await poller.poll_once()  # nothing changed since: no trigger wakes
        assert all(w._news.empty() for w in watchers[2:])
    finally:
        _leave(poller, watchers)


async def test_an_unlabelled_job_is_still_watched_by_get(emulator):
    body = {"displayName": "mine", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1", "env": [{"name": "EMULATOR_RUN_SECONDS", "value": "30"}]}}]}}
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        name = client.create_custom_job(body).name
    poller, watchers, first = await _watched(emulator, [name])
    try:
        assert first[0].name == name  # not in our labelled list: read by GET
        emulator.advance(120)
        await poller.poll_once()
        assert (await asyncio.wait_for(watchers[0].next(), 5)).state.value == "JOB_STATE_SUCCEEDED"
    finally:
        _leave(poller, watchers)
