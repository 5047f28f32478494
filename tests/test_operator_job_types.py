"""The three job types (custom job, hyperparameter tuning job, training pipeline) under the three
strategies, and the quota preflight: through ``dag.test()`` against the emulator."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
import requests

from airflow_gpu_sched.orchestration.accounting import RESULT_KEYS
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, with_a100_pool

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
STUDY = {"metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
         "parameters": [{"parameterId": "learning_rate", "scaleType": "UNIT_LOG_SCALE",
                         "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}},
                        {"parameterId": "batch_size", "discreteValueSpec": {"values": [32, 64, 128]}}],
         "algorithm": "RANDOM_SEARCH"}
SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-gpu.2-4:latest"
JOB_TYPE_ARGS = {
    "custom_job": {},
    "hyperparameter_tuning_job": dict(study_spec=STUDY, max_trial_count=4, parallel_trial_count=2),
    "training_pipeline": dict(model_display_name="nightly-model", model_serving_image_uri=SERVING_IMAGE),
}
COLLECTIONS = {"custom_job": "customJobs", "hyperparameter_tuning_job": "hyperparameterTuningJobs",
               "training_pipeline": "trainingPipelines"}
PREEMPTIBLE_A100 = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus"


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    fast_emulator.reset(with_a100_pool("pool-a", replicas=2))
    return fast_emulator


def _operator(strategy: str, job_type: str, **kw):
    from airflow_gpu_sched.operators import (
        FlexStartTrainingOperator,
        PersistentResourceTrainingOperator,
        SpotTrainingOperator,
    )

    common = dict(task_id=kw.pop("task_id", "train"), project_id=PROJECT, location=LOCATION,
                  image_uri="gcr.io/p/trainer:1", poll_interval=0.02, base_output_dir="gs://bucket/run",
                  job_type=job_type, **A100, **{**JOB_TYPE_ARGS[job_type], **kw})
    if strategy == "FLEX_START":
        return FlexStartTrainingOperator(max_wait_duration="1h", **common)
    if strategy == "SPOT":
        return SpotTrainingOperator(**common)
    return PersistentResourceTrainingOperator(persistent_resource_id="pool-a", **common)


def _get(emulator, name: str) -> dict:
    response = requests.get(f"{emulator.url}/v1/{name}", timeout=5)
    response.raise_for_status()
    return response.json()


def _list(emulator, collection: str) -> list[dict]:
    response = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/{collection}", timeout=5)
    response.raise_for_status()
    body = response.json()
    return next((v for k, v in body.items() if k != "nextPageToken"), [])


def _spec_of(resource: dict, job_type: str) -> dict:
    return {"custom_job": lambda r: r["jobSpec"], "hyperparameter_tuning_job": lambda r: r["trialJobSpec"],
            "training_pipeline": lambda r: r["trainingTaskInputs"]}[job_type](resource)


@pytest.mark.parametrize("strategy", ["FLEX_START", "SPOT", "PERSISTENT_RESOURCE"])
@pytest.mark.parametrize("job_type", list(JOB_TYPE_ARGS))
def test_each_job_type_runs_under_each_strategy(airflow, job_type, strategy):
    from airflow.sdk import DAG

    with DAG(f"{job_type}_{strategy}".lower(), schedule=None, start_date=START) as dag:
        _operator(strategy, job_type)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    job_name = training["job_name"]
    assert job_name.split("/")[4] == COLLECTIONS[job_type]
    assert tuple(training)[:len(RESULT_KEYS)] == RESULT_KEYS
    resource = _get(airflow, job_name)
    spec = _spec_of(resource, job_type)
    if strategy == "PERSISTENT_RESOURCE":
        assert spec["persistentResourceId"] == "pool-a" and "strategy" not in spec.get("scheduling", {})
    else:
        assert spec["scheduling"]["strategy"] == strategy
    assert resource["labels"]["managed-by"] == "airflow-gpu-sched"
    assert len(_list(airflow, COLLECTIONS[job_type])) == 1  # one submission, no duplicate
    assert training["strategy"] == strategy and training["gpu_hours"] > 0
    if job_type == "hyperparameter_tuning_job":
        trials = training["trials"]
        assert len(trials) == 4 and all(t["state"] == "SUCCEEDED" for t in trials)
        assert {tuple(sorted(t["parameters"])) for t in trials} == {("batch_size", "learning_rate")}
        best = max(trials, key=lambda t: t["final_measurement"]["accuracy"])
        assert training["best_trial"] == best
        trial_jobs = [_get(airflow, t["custom_job"]) for t in trials]
        assert all(_spec_of(j, "custom_job").get("persistentResourceId") == spec.get("persistentResourceId")
                   for j in trial_jobs)
        # GPU-hours are the trials' own (start to end of each, as Vertex reports them): four trials of
        # one GPU side by side, not the tuning job's wall time
        assert training["gpu_hours"] == pytest.approx(sum(
            (_seconds(t["endTime"]) - _seconds(t["startTime"])) / 3600 for t in resource["trials"]), abs=1e-4)
        assert training["gpu_hours"] > (_seconds(resource["endTime"]) - _seconds(resource["startTime"])) / 3600
    elif job_type == "training_pipeline":
        assert training["model_name"].startswith(f"projects/{PROJECT}/locations/{LOCATION}/models/")
        model = _get(airflow, training["model_name"])
        assert model["displayName"] == "nightly-model" and training["model_version"] == model["versionId"]
        assert model["containerSpec"]["imageUri"] == SERVING_IMAGE
    else:
        assert not set(training) - set(RESULT_KEYS)


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_a_second_pipeline_run_registers_a_new_version_of_the_parent_model(airflow):
    from airflow.sdk import DAG

    with DAG("pipeline_v1", schedule=None, start_date=START) as dag:
        _operator("FLEX_START", "training_pipeline")
    first = run_dag(dag, logical_date=START)["train"].return_value
    with DAG("pipeline_v2", schedule=None, start_date=START) as dag:
        _operator("FLEX_START", "training_pipeline", parent_model=first["model_name"])
    second = run_dag(dag, logical_date=START)["train"].return_value
    assert second["model_name"] == first["model_name"]
    assert (first["model_version"], second["model_version"]) == ("1", "2")


def test_a_spot_tuning_job_whose_trials_stock_out_is_resubmitted_and_completes(airflow):
    from airflow.sdk import DAG

    airflow.reset({**FAST, "provisioningSeconds": 40})

    with DAG("spot_tuning_recovery", schedule=None, start_date=START) as dag:
        # max_failed_trial_count=1: the first trial that stocks out fails the tuning job (with 0, Vertex
        # would carry on with the other trials)
        _operator("SPOT", "hyperparameter_tuning_job", env={"EMULATOR_RUN_SECONDS": "300"},
                  max_preemption_retries=2, max_failed_trial_count=1)

    def preempt_one_trial_seven_times():
        done, deadline, target = 0, time.monotonic() + 60, None
        while done < 7 and time.monotonic() < deadline:
            jobs = _list(airflow, "customJobs")
            running = [j for j in jobs if j["state"] == "JOB_STATE_RUNNING" and (target is None or j["name"] == target)]
            if running:
                target = running[0]["name"]
                time.sleep(0.2)
                airflow.preempt(target)
                done += 1
            time.sleep(0.02)

    preempter = threading.Thread(target=preempt_one_trial_seven_times, daemon=True)
    preempter.start()
    result = run_dag(dag, logical_date=START)
    preempter.join()
    assert result.state == "success"
    training = result["train"].return_value
    tuning_jobs = _list(airflow, "hyperparameterTuningJobs")
    assert len(tuning_jobs) == 2  # the stocked-out one and its resubmission
    assert [a["state"] for a in training["attempts"]] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]
    assert "STOCKOUT" in training["attempts"][0]["error"]
    assert training["preemptions"] >= 1 and len(training["trials"]) == 4


# ---------------------------------------------------------------------------- quota preflight


def _set_quota(emulator, metric: str, limit: int) -> None:
    response = requests.post(f"{emulator.url}/emulator/v1/quotas",
                             json={"metric": metric, "region": LOCATION, "limit": limit}, timeout=5)
    response.raise_for_status()


def test_a_quota_below_the_need_fails_before_any_create_naming_the_metric(airflow):
    from airflow.sdk import DAG

    _set_quota(airflow, PREEMPTIBLE_A100, 0)  # not even one trial (1 GPU) fits: Vertex would refuse it

    with DAG("quota_too_low", schedule=None, start_date=START) as dag:
        _operator("SPOT", "hyperparameter_tuning_job", parallel_trial_count=4)

    result = run_dag(dag, logical_date=START)
    assert result.state == "failed"
    assert sum(v for k, v in airflow.stats()["requests"].items() if k.endswith(".create")) == 0
    ledger = result.task_state_store["train"]["airflow_gpu_sched.ledger"]
    error = ledger["attempts"][0]["error"]
    assert "custom_model_training_preemptible_nvidia_a100_gpus" in error and LOCATION in error
    assert "is 0, the job needs 1" in error and "request an increase" in error


def test_parallel_trials_past_the_quota_are_not_refused_they_wait_their_turn(airflow):
    """Vertex refuses only a trial that alone exceeds the quota; the others wait QUEUED for it
    ("Understand the training service"), so the preflight must not stop the job."""
    from airflow.sdk import DAG

    _set_quota(airflow, PREEMPTIBLE_A100, 1)  # two parallel trials x 1 GPU: one at a time
    with DAG("quota_trials_wait", schedule=None, start_date=START) as dag:
        _operator("SPOT", "hyperparameter_tuning_job", parallel_trial_count=2, max_trial_count=2)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    assert airflow.stats()["hyperparameterTuningJobsCreated"] == 1


def test_a_plan_skips_the_step_whose_quota_cannot_fit(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    _set_quota(airflow, PREEMPTIBLE_A100, 0)
    with DAG("quota_plan", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                            poll_interval=0.02, plan=[{"strategy": "SPOT"}, {"strategy": "STANDARD"}], **A100)

    training = run_dag(dag, logical_date=START)["train"].return_value
    assert [(a["strategy"], a["state"]) for a in training["attempts"]] == [
        ("SPOT", "QUOTA_TOO_LOW"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert training["attempts"][0]["job_name"] is None
    assert airflow.stats()["jobsCreated"] == {"STANDARD": 1}


def test_a_quota_api_that_may_not_be_read_only_warns(airflow, capfd):
    from airflow.sdk import DAG

    response = requests.post(f"{airflow.url}/emulator/v1/quotas", json={"deny": True}, timeout=5)
    response.raise_for_status()
    with DAG("quota_denied", schedule=None, start_date=START) as dag:
        _operator("FLEX_START", "custom_job")

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1}
    assert "could not read the GPU quota" in capfd.readouterr().out  # the task log, on stdout under dag.test


def test_quota_preflight_false_submits_past_a_low_quota(airflow):
    from airflow.sdk import DAG

    _set_quota(airflow, PREEMPTIBLE_A100, 0)
    with DAG("quota_off", schedule=None, start_date=START) as dag:
        _operator("FLEX_START", "custom_job", quota_preflight=False)

    run_dag(dag, logical_date=START)
    assert airflow.stats()["requests"].get("customJobs.create", 0) == 1  # sent: the service decides


def test_a_pipeline_failed_for_quota_moves_the_plan_on_and_shows_as_quota_exceeded(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    _set_quota(airflow, PREEMPTIBLE_A100, 0)  # the service creates the pipeline, then fails it with code 8
    with DAG("pipeline_quota", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                            poll_interval=0.02, quota_preflight=False, job_type="training_pipeline",
                            plan=[{"strategy": "SPOT"}, {"strategy": "STANDARD"}], **A100,
                            **JOB_TYPE_ARGS["training_pipeline"])

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts] == [("SPOT", "QUOTA_EXCEEDED"),
                                                               ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert attempts[0]["error"] == f"The following quota metrics exceed quota limits: {PREEMPTIBLE_A100}"
    assert _get(airflow, attempts[0]["job_name"])["error"]["code"] == 8


def test_a_pipeline_failed_for_quota_on_the_last_step_fails_as_quota_too_low(airflow):
    from airflow_gpu_sched.orchestration.errors import QuotaTooLow

    _set_quota(airflow, PREEMPTIBLE_A100, 0)
    op = _operator("SPOT", "training_pipeline", quota_preflight=False, deferrable=False)
    with pytest.raises(QuotaTooLow, match="FAILED for quota.*custom_model_training_preemptible_nvidia_a100_gpus"):
        op.execute({})


def test_a_tuning_job_whose_trials_wait_for_quota_is_cancelled_past_its_bound(airflow):
    from airflow_gpu_sched.orchestration.errors import CapacityWaitExpired

    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)  # no trial can start
    op = _operator("SPOT", "hyperparameter_tuning_job", capacity_wait_timeout=0.5, deferrable=False)
    with pytest.raises(CapacityWaitExpired, match="not RUNNING within its bound"):
        op.execute({})
    tuning = requests.get(f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/hyperparameterTuningJobs",
                          timeout=5).json()["hyperparameterTuningJobs"]
    assert [t["state"] for t in tuning] == ["JOB_STATE_CANCELLED"]
    assert set(airflow.stats()["jobsByState"]) == {"JOB_STATE_CANCELLED"}  # its trials too: no orphan


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("job_type", "kwargs", "field"), [
    ("custom_job", dict(study_spec=STUDY), "study_spec"),
    ("custom_job", dict(model_display_name="m"), "model_display_name"),
    ("training_pipeline", dict(max_trial_count=3), "max_trial_count"),
    ("unknown_job", {}, "job_type"),
], ids=["study-spec-on-a-custom-job", "model-on-a-custom-job", "trials-on-a-pipeline", "unknown-job-type"])
def test_job_type_arguments_on_the_wrong_type_are_rejected_at_parse_time(job_type, kwargs, field):
    from airflow_gpu_sched.operators import SpotTrainingOperator
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    with pytest.raises(InvalidTrainingSpec) as info:
        SpotTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                             job_type=job_type, **A100, **kwargs)
    assert info.value.violations[0].path == field


# ---------------------------------------------------------------------------- cancellation


@pytest.mark.parametrize("job_type", list(JOB_TYPE_ARGS))
async def test_a_killed_task_cancels_its_job_whatever_the_job_type(fast_emulator, job_type):
    """The trigger's on_kill (a user marked the deferred task failed, or cleared it) cancels a
    tuning job or a pipeline as it does a custom job: the resource name says which API to call."""
    from airflow_gpu_sched.orchestration.job_types import JobOptions, get_job_type, job_type_of
    from airflow_gpu_sched.triggers import CustomJobTrigger
    from airflow_gpu_sched.vertex.client import VertexClient

    op = _operator("SPOT", job_type)
    kind = get_job_type(job_type)
    client = VertexClient(location=LOCATION, project=PROJECT, api_endpoint=fast_emulator.url)
    created = kind.create(client, kind.body(op.build_job(), JobOptions.of(**JOB_TYPE_ARGS[job_type])))
    assert job_type_of(created.name) is kind

    await CustomJobTrigger(created.name, poll_interval=0.02).on_kill()

    state = kind.view(kind.get(client, created.name)).state.value
    assert state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    assert fast_emulator.stats()["requests"].get(f"{kind.collection}.cancel") == 1
