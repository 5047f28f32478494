"""No secret leaves the worker: trigger kwargs and every trigger event, at the wire.

The triggerer logs each event in full and Airflow stores it unencrypted in
``task_instance.next_kwargs`` (and the kwargs in the ``trigger`` row), so a value rendered
into a job's ``env``, ``args`` or ``command`` must not be in either. Each job here carries a
planted secret in every such place; the triggers run against the emulator as the triggerer
runs them; the serialized kwargs and every event are searched for it. The operator still
decides by what is left: the event keeps the state, times, error, machines and counts.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import pytest

from airflow_gpu_sched.orchestration.event_fields import public_resource, public_spec
from airflow_gpu_sched.orchestration.job_types import HYPERPARAMETER_TUNING_JOB, TRAINING_PIPELINE, JobOptions
from airflow_gpu_sched.triggers import CustomJobTrigger, PersistentCapacityTrigger
from airflow_gpu_sched.triggers.race import RaceTrigger
from airflow_gpu_sched.vertex.client import VertexClient
from airflow_gpu_sched.vertex.models import CustomJob
from tests.conftest import LOCATION, PROJECT, with_a100_pool

SECRET = "hf_" + secrets.token_hex(12)
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"


def _spec(run_seconds: int = 1, exit_code: int | None = None, strategy: str = "STANDARD") -> dict:
    env = [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}, {"name": "HF_TOKEN", "value": SECRET}]
    if exit_code is not None:
        env.append({"name": "EMULATOR_EXIT_CODE", "value": str(exit_code)})
    return {"workerPoolSpecs": [
        {"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
         "replicaCount": "1",
         "containerSpec": {"imageUri": "gcr.io/p/t:1", "env": env, "command": ["python", f"--token={SECRET}"],
                           "args": [f"--hf-token={SECRET}"]}},
        {},  # an empty pool keeps its position
        {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
         "pythonPackageSpec": {"executorImageUri": "gcr.io/p/e:1", "packageUris": ["gs://b/p.tar.gz"],
                               "pythonModule": "m", "args": [SECRET],
                               "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)},
                                       {"name": "T", "value": SECRET}]}}],
        "scheduling": {"strategy": strategy}}


def _no_secret(*payloads) -> None:
    for payload in payloads:
        text = json.dumps(payload)
        assert SECRET not in text, f"the planted secret reached a trigger payload: {text[:2000]}"


async def _events(trigger, timeout=30.0) -> list[dict]:
    async def run():
        return [event.payload async for event in trigger.run()]
    return await asyncio.wait_for(run(), timeout)


def _client(emulator) -> VertexClient:
    return VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)


@pytest.mark.parametrize("exit_code", [None, 3], ids=["succeeded", "failed"])
async def test_custom_job_trigger_kwargs_and_events_carry_no_secret(fast_emulator, exit_code):
    with _client(fast_emulator) as client:
        name = client.create_custom_job({"displayName": "s", "jobSpec": _spec(exit_code=exit_code)}).name
    trigger = CustomJobTrigger(name, poll_interval=0.05)
    events = await _events(trigger)
    _no_secret(trigger.serialize(), *events)
    (event,) = events
    assert event["status"] == ("succeeded" if exit_code is None else "failed")
    # what the operator decides by is still there
    job = CustomJob.model_validate(event["job"])
    assert job.name == name and job.state is not None and job.end_time is not None
    assert job.job_spec.accelerators_held() == 1 and job.job_spec.worker_pool_specs[1].is_empty()
    assert job.job_spec.scheduling.strategy.value == "STANDARD"
    if exit_code is not None:
        assert "non-zero status of 3" in event["message"] and job.error is not None


async def test_a_bound_cancel_event_carries_no_secret(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)  # QUEUED for ever
    with _client(fast_emulator) as client:
        spec = _spec(strategy="SPOT")
        spec["workerPoolSpecs"] = spec["workerPoolSpecs"][:1]  # SPOT runs on A2/A3 only
        name = client.create_custom_job({"displayName": "s", "jobSpec": spec}).name
    trigger = CustomJobTrigger(name, poll_interval=0.05, running_by=time.time() + 0.3, bound_reason="b")
    events = await _events(trigger)
    _no_secret(trigger.serialize(), *events)
    assert events[0]["status"] == "capacity_timeout"


async def test_race_trigger_event_carries_no_secret(fast_emulator):
    with _client(fast_emulator) as client:
        names = [client.create_custom_job({"displayName": f"r{i}", "jobSpec": _spec()}).name for i in range(2)]
    trigger = RaceTrigger(names, poll_interval=0.05)
    events = await _events(trigger)
    _no_secret(trigger.serialize(), *events)
    assert events[0]["status"] == "race_won"
    assert all(m["job"]["name"] in names for m in events[0]["members"])


@pytest.mark.parametrize("kind", [HYPERPARAMETER_TUNING_JOB, TRAINING_PIPELINE], ids=lambda k: k.key)
async def test_tuning_and_pipeline_events_carry_no_secret(fast_emulator, kind):
    job = CustomJob.model_validate({"displayName": "s", "jobSpec": _spec()})
    options = JobOptions.of(
        study_spec={"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}], "parameters": [
            {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1}}]},
        max_trial_count=2, parallel_trial_count=1) if kind is HYPERPARAMETER_TUNING_JOB else JobOptions.of(
        model_display_name="m", model_serving_image_uri="gcr.io/p/serve:1")
    body = kind.body(job, options).to_api()
    if kind is TRAINING_PIPELINE:  # the serving container's env and args are the user's too
        body["modelToUpload"]["containerSpec"].update(env=[{"name": "K", "value": SECRET}], args=[SECRET])
    with _client(fast_emulator) as client:
        name = kind.create(client, body).name
    trigger = CustomJobTrigger(name, poll_interval=0.05)
    events = await _events(trigger, timeout=60)
    _no_secret(trigger.serialize(), *events)
    (event,) = events
    assert event["status"] == "succeeded"
    resource = kind.resource_of(event)
    assert kind.view(resource).job_spec.accelerators_held() == 1
    assert set(kind.outputs(resource)) == set(kind.output_keys)


async def test_capacity_trigger_kwargs_carry_no_secret_and_it_still_fits_the_pools(fast_emulator):
    fast_emulator.reset(with_a100_pool())
    spec = _spec()
    del spec["scheduling"]
    spec["workerPoolSpecs"] = spec["workerPoolSpecs"][:1]
    spec["persistentResourceId"] = "pool-a"
    trigger = PersistentCapacityTrigger(f"{PARENT}/persistentResources/pool-a", spec, time.time() + 30,
                                        poll_interval=0.05)
    path, kwargs = trigger.serialize()
    _no_secret(kwargs)
    rebuilt = PersistentCapacityTrigger(**kwargs)  # as the triggerer builds it from the row
    events = await _events(rebuilt)
    _no_secret(*events)
    assert events[0]["status"] == "capacity_available"


def test_the_whitelist_drops_unknown_fields_and_wrong_shapes():
    """A field Google adds later, or a value of an unexpected shape, is dropped, not passed on."""
    wire = {"name": "n", "newField": SECRET, "jobSpec": {"serviceAccount": SECRET, "network": SECRET,
                                                          "workerPoolSpecs": [{"nfsMounts": [{"path": SECRET}]},
                                                                              SECRET],
                                                          "scheduling": {"strategy": "SPOT"}},
            "labels": {"team": "a"}, "trials": SECRET}
    kept = public_resource(wire)
    _no_secret(kept)
    assert kept == {"name": "n", "labels": {"team": "a"},
                    "jobSpec": {"workerPoolSpecs": [{}, None], "scheduling": {"strategy": "SPOT"}}}
    assert public_spec({"workerPoolSpecs": "x"}) == {}
