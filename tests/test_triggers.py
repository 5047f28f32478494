"""Triggers at the wire: run against the emulator as the triggerer would run them."""

from __future__ import annotations

import asyncio
import importlib
import threading
import time

import pytest
import requests

from airflow_gpu_sched.triggers import CustomJobTrigger, PersistentCapacityTrigger
from airflow_gpu_sched.vertex.client import VertexClient
from tests.conftest import FAST, LOCATION, PROJECT, with_a100_pool

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"


def _job(strategy="STANDARD", run_seconds=30, exit_code=None, **scheduling) -> dict:
    env = [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]
    if exit_code is not None:
        env.append({"name": "EMULATOR_EXIT_CODE", "value": str(exit_code)})
    return {"displayName": "t", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
        "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/t:1", "env": env}}],
        "scheduling": {"strategy": strategy, **scheduling}}}


def _create(emulator, body) -> str:
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        return client.create_custom_job(body).name


async def _first(trigger, timeout=30.0) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload
    return await asyncio.wait_for(first(), timeout)


@pytest.mark.parametrize("trigger", [
    CustomJobTrigger("projects/p/locations/l/customJobs/1", "my_conn", 5.0, 60.0, 2),
    CustomJobTrigger("projects/p/locations/l/customJobs/1", "my_conn", 5.0, 60.0, 0, running_by=1.5e9,
                     bound_reason="capacity_wait_timeout=600s of SPOT"),
    PersistentCapacityTrigger("projects/p/locations/l/persistentResources/r", {"workerPoolSpecs": []}, 1.5e9,
                              "my_conn", 3.0, 30.0),
], ids=["job", "job-with-a-running-bound", "capacity"])
def test_serialize_round_trips(trigger):
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    assert all(isinstance(v, (str, int, float, dict, type(None))) for v in kwargs.values())


async def test_job_trigger_reports_success_with_the_job(fast_emulator):
    name = _create(fast_emulator, _job())
    event = await _first(CustomJobTrigger(name, poll_interval=0.05))
    assert event["status"] == "succeeded" and event["job"]["name"] == name
    assert event["job"]["state"] == "JOB_STATE_SUCCEEDED"


async def test_job_trigger_user_code_failure(fast_emulator):
    name = _create(fast_emulator, _job(exit_code=2))
    event = await _first(CustomJobTrigger(name, poll_interval=0.05))
    assert event["status"] == "failed" and "non-zero status of 2" in event["message"]


async def test_job_trigger_flex_start_wait_expiry(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    name = _create(fast_emulator, _job("FLEX_START", maxWaitDuration="60s"))
    event = await _first(CustomJobTrigger(name, poll_interval=0.05))
    assert event["status"] == "capacity_timeout"


async def test_job_trigger_counts_the_service_restarts_it_sees(fast_emulator):
    fast_emulator.reset({**FAST, "provisioningSeconds": 40})  # each restart PENDING for 0.4 s: never missed
    name = _create(fast_emulator, _job("SPOT", run_seconds=3000))

    def preempt_seven_times():
        done = 0
        while done < 7:  # each time after 0.2 s RUNNING, so a 0.02 s poll sees every segment
            job = requests.get(f"{fast_emulator.url}/v1/{name}", timeout=5).json()
            if job["state"] == "JOB_STATE_RUNNING":
                time.sleep(0.2)
                fast_emulator.preempt(name)
                done += 1
            time.sleep(0.02)

    preempter = threading.Thread(target=preempt_seven_times)
    preempter.start()
    event = await _first(CustomJobTrigger(name, poll_interval=0.02))
    preempter.join()
    assert event["status"] == "preempted" and "STOCKOUT" in event["message"]
    assert event["observed_restarts"] == 6


def test_a_trigger_serialized_before_the_bound_existed_still_loads():
    """Triggers persisted by an older version carry no running_by: they wait without a bound."""
    trigger = CustomJobTrigger(**{"job_name": "projects/p/locations/l/customJobs/1", "gcp_conn_id": "c",
                                  "poll_interval": 5.0, "transient_error_window": 60.0, "observed_restarts": 0,
                                  "polling": "batched"})
    assert trigger.running_by is None and trigger.serialize()[1]["running_by"] is None


@pytest.mark.parametrize("polling", ["batched", "per_job"])
async def test_a_job_never_running_by_the_bound_is_cancelled_and_reported_as_a_capacity_outcome(
        fast_emulator, polling):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)  # QUEUED for ever
    name = _create(fast_emulator, _job("SPOT"))
    event = await _first(CustomJobTrigger(name, poll_interval=0.05, polling=polling, running_by=time.time() + 0.3,
                                          bound_reason="capacity_wait_timeout=0.3s of SPOT"))
    assert event["status"] == "capacity_timeout" and event["running_bound"] == "capacity_wait_timeout=0.3s of SPOT"
    assert "was not RUNNING by" in event["message"] and "still JOB_STATE_QUEUED" in event["message"]
    job = requests.get(f"{fast_emulator.url}/v1/{name}", timeout=5).json()
    assert job["state"] == "JOB_STATE_CANCELLED" and event["job"]["state"] == "JOB_STATE_CANCELLED"  # no orphan
    assert fast_emulator.stats()["cancels"] == 1


@pytest.mark.timeout(600)  # hang guards only
async def test_the_bound_counts_only_until_the_first_running(vertex_conn, capfd):
    """A SPOT job that ran, was preempted and waits QUEUED again is past its bound but not
    cancelled: restarts after the first RUNNING are the preemption budget's business.

    No step depends on the machine's speed (it was flaky under load: a 0.2 s sleep for the trigger
    to see RUNNING, a 60 s job at 100x that could end before the preemption, a bound 1 s ahead that
    could pass before the job ran). Emulated time moves only when the test advances it (speed 1,
    steps of minutes), the bound is already past when the trigger starts, and the test waits for
    the trigger's own log line of each state it saw (written where it decides on the bound)."""
    emulator = vertex_conn
    emulator.reset({**FAST, "speed": 1})
    name = _create(emulator, _job("SPOT", run_seconds=3600))
    emulator.advance(60)  # admitted, provisioned: RUNNING, before the trigger looks
    assert _get(emulator, name)["state"] == "JOB_STATE_RUNNING"

    logged = []

    async def saw(state: str) -> None:  # the trigger logged that it saw the job in this state
        while f"{name}: {state}" not in "".join(logged):
            logged.append("".join(capfd.readouterr()))  # its structlog lines, on the process's stdout
            await asyncio.sleep(0.01)

    trigger = asyncio.ensure_future(_first(CustomJobTrigger(name, poll_interval=0.05,
                                                            running_by=time.time() - 1), timeout=240))
    await asyncio.wait_for(saw("JOB_STATE_RUNNING"), 120)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    emulator.preempt(name)  # back to QUEUED, with no Spot capacity, long past the bound
    assert _get(emulator, name)["state"] == "JOB_STATE_QUEUED"
    await asyncio.wait_for(saw("JOB_STATE_QUEUED"), 120)  # the trigger saw it past the bound
    assert emulator.stats()["cancels"] == 0
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=8)
    emulator.advance(2 * 3600)  # runs again, to its end
    event = await trigger
    assert event["status"] == "succeeded" and emulator.stats()["cancels"] == 0
    assert "JOB_STATE_RUNNING" in event["observed"]["seen"]


def _get(emulator, name: str) -> dict:
    return requests.get(f"{emulator.url}/v1/{name}", timeout=30).json()


@pytest.mark.parametrize("state, started, running_by, now, expired", [
    ("JOB_STATE_QUEUED", False, 100.0, 100.0, True),
    ("JOB_STATE_PENDING", False, 100.0, 150.0, True),
    ("JOB_STATE_QUEUED", False, 100.0, 99.0, False),  # not yet
    ("JOB_STATE_QUEUED", False, None, 1e12, False),  # no bound
    ("JOB_STATE_QUEUED", True, 100.0, 150.0, False),  # seen RUNNING once: a SPOT restart, not the bound's
    ("JOB_STATE_RUNNING", False, 100.0, 150.0, False),
    ("JOB_STATE_CANCELLING", False, 100.0, 150.0, False),  # ending anyway
], ids=["at-the-bound", "pending-past", "before", "unbounded", "restarted", "running", "cancelling"])
def test_past_running_bound_decides_on_the_first_running_only(state, started, running_by, now, expired):
    from airflow_gpu_sched.orchestration import state_times
    from airflow_gpu_sched.orchestration.watch import past_running_bound
    from airflow_gpu_sched.vertex.models import CustomJob

    # every job has a startTime, as on real Vertex (set at admission): it never decides
    job = CustomJob.model_validate({"name": "projects/p/locations/l/customJobs/1", "state": state,
                                    "startTime": "2026-01-01T00:00:00Z"})
    times = state_times.new()
    for seen in (["JOB_STATE_QUEUED", "JOB_STATE_RUNNING"] if started else []) + [state]:
        state_times.note(times, CustomJob(state=seen), 0.0)
    assert past_running_bound(job, times, running_by, now) is expired


async def test_job_trigger_rides_out_injected_faults(fast_emulator):
    name = _create(fast_emulator, _job())
    fast_emulator.set_faults(error_rate=0.5, status_codes=[429, 503])
    event = await _first(CustomJobTrigger(name, poll_interval=0.05, transient_error_window=30))
    assert event["status"] == "succeeded"
    assert fast_emulator.stats()["faultsInjected"] > 0


async def test_job_trigger_gives_up_after_the_transient_error_window(fast_emulator):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    fast_emulator.set_faults(error_rate=1.0, status_codes=[503])
    started = time.monotonic()
    event = await _first(CustomJobTrigger(name, poll_interval=0.05, transient_error_window=1.0))
    assert event["status"] == "error" and "unreachable" in event["message"]
    assert time.monotonic() - started >= 1.0  # not before the window


async def test_on_kill_cancels_the_job(fast_emulator):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    await CustomJobTrigger(name, poll_interval=0.05).on_kill()
    state = requests.get(f"{fast_emulator.url}/v1/{name}", timeout=5).json()["state"]
    # job_state.proto: from CANCELLING "the job may only go to either JOB_STATE_SUCCEEDED,
    # JOB_STATE_FAILED or JOB_STATE_CANCELLED" (a running job, under the emulator's cancelOutcome)
    assert state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED")
    assert fast_emulator.stats()["cancels"] == 1


def _pool_spec() -> dict:
    spec = _job()["jobSpec"]
    del spec["scheduling"]
    spec["persistentResourceId"] = "pool-a"
    return spec


@pytest.fixture
def pool(fast_emulator) -> str:
    fast_emulator.reset(with_a100_pool())
    return f"{PARENT}/persistentResources/pool-a"


async def test_capacity_trigger_waits_for_a_busy_pool(fast_emulator, pool):
    _create(fast_emulator, {"displayName": "blocker", "jobSpec": _pool_spec()})
    time.sleep(0.05)
    event = await _first(PersistentCapacityTrigger(pool, _pool_spec(), time.time() + 30, poll_interval=0.05))
    assert event["status"] == "capacity_available"


async def test_capacity_trigger_times_out(fast_emulator, pool):
    blocker = _job(run_seconds=100_000)["jobSpec"] | {"persistentResourceId": "pool-a"}
    del blocker["scheduling"]
    _create(fast_emulator, {"displayName": "blocker", "jobSpec": blocker})
    event = await _first(PersistentCapacityTrigger(pool, _pool_spec(), time.time() + 0.5, poll_interval=0.05))
    assert event["status"] == "capacity_timeout" and "0 free of 1 wanted" in event["message"]


async def test_capacity_trigger_fails_on_a_resource_in_error(fast_emulator, pool):
    fast_emulator.set_resource_state(pool, "ERROR", "the reservation was released")
    event = await _first(PersistentCapacityTrigger(pool, _pool_spec(), None, poll_interval=0.05))
    assert event["status"] == "failed" and "the reservation was released" in event["message"]


def test_triggers_carry_the_impersonation_chain_and_still_read_kwargs_serialized_without_it():
    """The operator's impersonation_chain reaches the triggerer; a trigger row written before
    the argument existed (no such key) still loads, as no impersonation."""
    import json

    chain = ["hop@p.iam.gserviceaccount.com", "target@p.iam.gserviceaccount.com"]
    name = f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1"
    for trigger in (CustomJobTrigger(name, impersonation_chain=tuple(chain)),
                    PersistentCapacityTrigger(f"projects/{PROJECT}/locations/{LOCATION}/persistentResources/r", {},
                                              None, impersonation_chain=tuple(chain))):
        _, kwargs = trigger.serialize()
        assert json.loads(json.dumps(kwargs))["impersonation_chain"] == chain
        assert type(trigger)(**kwargs).impersonation_chain == chain
        kwargs.pop("impersonation_chain")
        assert type(trigger)(**kwargs).impersonation_chain is None
