"""How a cancel ends, under each variant of what Google leaves open (scenario ``variants``):

* ``cancelOutcome: cancelled | succeeded | failed``: job_state.proto, CANCELLING "may only go to
  either JOB_STATE_SUCCEEDED, JOB_STATE_FAILED or JOB_STATE_CANCELLED"; CancelCustomJob: "success
  is not guaranteed".
* ``cancelEnded: refused | noop``: a cancel of a job that has already ended is a 400
  FAILED_PRECONDITION, or does nothing (gcloud ai-platform jobs cancel: "If the job is already
  finished, the command will not perform an operation and exit successfully").

The emulator's answers, then what our code does under each: a trigger's ``on_kill`` and
``jobs orphans --cancel`` (``platform.cancel_job``) never fail on a job that has ended.
The race and the operators run whole under these variants with ``EMULATOR_VARIANTS``
(tests/conftest.py) and through ``VARIANTS``."""

from __future__ import annotations

import pytest
import requests

from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.vertex.client import VertexClient
from tests.conftest import FAST, LOCATION, PROJECT
from tests.test_emulator_job_types import pipeline, tuning

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
OUTCOMES = {"cancelled": "JOB_STATE_CANCELLED", "succeeded": "JOB_STATE_SUCCEEDED", "failed": "JOB_STATE_FAILED"}


def _job(run_seconds: int = 10_000) -> dict:
    return {"displayName": "c", "labels": {"managed-by": "airflow-gpu-sched"}, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1",
                          "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]}}]}}


def _reset(emulator, **variants: str) -> None:
    emulator.reset({**FAST, "speed": 1, "variants": variants})


def _create(emulator, collection: str, body: dict) -> str:
    response = requests.post(f"{emulator.url}/v1/{PARENT}/{collection}", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["name"]


def _get(emulator, name: str) -> dict:
    return requests.get(f"{emulator.url}/v1/{name}", timeout=10).json()


def _cancel(emulator, name: str) -> requests.Response:
    return requests.post(f"{emulator.url}/v1/{name}:cancel", json={}, timeout=10)


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("when", ["queued", "running"])
def test_a_cancelled_custom_job_ends_as_the_variant_says(emulator, outcome, when):
    _reset(emulator, cancelOutcome=outcome)
    name = _create(emulator, "customJobs", _job())
    if when == "running":
        emulator.advance(60)
        assert _get(emulator, name)["state"] == "JOB_STATE_RUNNING"
    assert _cancel(emulator, name).json() == {}
    assert _get(emulator, name)["state"] == "JOB_STATE_CANCELLING"
    emulator.advance(5)
    job = _get(emulator, name)
    if when == "queued":  # nothing ran that could complete or fail: CANCELLED under every variant
        outcome = "cancelled"
    assert job["state"] == OUTCOMES[outcome] and job["endTime"]
    if outcome == "cancelled":
        assert job["error"] == {"code": 1, "message": "CANCELED"}
    elif outcome == "succeeded":
        assert "error" not in job and job["startTime"] <= job["endTime"]  # a job that succeeded has run
    else:
        assert job["error"]["code"] == 3 and "status of 143" in job["error"]["message"]


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_a_cancelled_tuning_job_and_pipeline_end_as_the_variant_says(emulator, outcome):
    _reset(emulator, cancelOutcome=outcome)
    tune = _create(emulator, "hyperparameterTuningJobs", tuning(max_trials=2, parallel=2))
    pipe = _create(emulator, "trainingPipelines", pipeline(strategy="STANDARD"))
    emulator.advance(40)
    for name in (tune, pipe):
        assert _cancel(emulator, name).json() == {}
    emulator.advance(10)
    assert _get(emulator, tune)["state"] == OUTCOMES[outcome]
    assert _get(emulator, pipe)["state"] == OUTCOMES[outcome].replace("JOB_STATE", "PIPELINE_STATE")


@pytest.mark.parametrize("ended", ["refused", "noop"])
def test_a_cancel_of_an_ended_job_is_refused_or_does_nothing(emulator, ended):
    _reset(emulator, cancelEnded=ended)
    names = [_create(emulator, "customJobs", _job(run_seconds=5)),
             _create(emulator, "hyperparameterTuningJobs", tuning(max_trials=1, parallel=1)),
             _create(emulator, "trainingPipelines", pipeline(strategy="STANDARD"))]
    emulator.advance(600)
    for name in names:
        before = _get(emulator, name)
        assert before["state"].endswith("_SUCCEEDED"), before["state"]
        response = _cancel(emulator, name)
        if ended == "refused":
            error = response.json()["error"]
            assert response.status_code == 400 and error["status"] == "FAILED_PRECONDITION"
            assert "already in state" in error["message"]
        else:
            assert response.status_code == 200 and response.json() == {}
        emulator.advance(10)
        assert _get(emulator, name) == before  # nothing changed either way
    assert emulator.stats()["cancels"] == 0


# --- what our code does under each


VARIANT_GRID = [pytest.param({"cancelOutcome": o, "cancelEnded": e}, id=f"{o}-{e}")
                for o in OUTCOMES for e in ("refused", "noop")]


@pytest.mark.parametrize("variants", VARIANT_GRID)
async def test_on_kill_cancels_a_running_job_and_does_not_fail_on_an_ended_one(vertex_conn, variants):
    vertex_conn.reset({**FAST, "variants": variants})
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=vertex_conn.url) as client:
        running = client.create_custom_job(_job()).name
        ended = client.create_custom_job(_job(run_seconds=5)).name
    vertex_conn.advance(120)
    assert _get(vertex_conn, ended)["state"] == "JOB_STATE_SUCCEEDED"
    assert _get(vertex_conn, running)["state"] == "JOB_STATE_RUNNING"
    await CustomJobTrigger(running, poll_interval=0.05).on_kill()
    await CustomJobTrigger(ended, poll_interval=0.05).on_kill()  # no error under either cancelEnded
    vertex_conn.advance(10)
    assert _get(vertex_conn, running)["state"] == OUTCOMES[variants["cancelOutcome"]]
    assert _get(vertex_conn, ended)["state"] == "JOB_STATE_SUCCEEDED"
    assert vertex_conn.stats()["cancels"] == 1


@pytest.mark.parametrize("variants", VARIANT_GRID)
def test_the_orphans_cancel_of_a_job_that_ended_meanwhile_is_no_error(emulator, variants):
    from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB
    from airflow_gpu_sched.tools.platform import cancel_job, list_jobs

    emulator.reset({**FAST, "speed": 1, "variants": variants})
    running = _create(emulator, "customJobs", _job())
    ending = _create(emulator, "customJobs", _job(run_seconds=5))
    emulator.advance(12)  # both RUNNING (queue 1 s, provisioning 10 s)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        listed = {r.name for r in list_jobs(client, [CUSTOM_JOB]) if r.active}
        assert listed == {running, ending}
        emulator.advance(60)  # one of them ends between the list and the cancel
        said = {name: cancel_job(client, name) for name in (running, ending)}
    assert said[running] == f"cancel requested: {running}"
    if variants["cancelEnded"] == "refused":
        assert said[ending].startswith(f"not cancelled (it has already ended): {ending}")
    else:
        assert said[ending] == f"cancel requested: {ending}"
    emulator.advance(10)
    assert _get(emulator, running)["state"] == OUTCOMES[variants["cancelOutcome"]]
    assert _get(emulator, ending)["state"] == "JOB_STATE_SUCCEEDED"
