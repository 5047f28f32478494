"""Issue 40: "got capacity" from the custom job that holds the GPUs. A training pipeline says
RUNNING as soon as its backing job exists, minutes before that job has GPUs (observed; the
emulator's default ``pipelineRunning: job_created``); a tuning job may say RUNNING once its first
trial is created (``tuningRunning: trial_created``, not known). Bounds and races read the job
itself. Through ``dag.test()`` / the operator against the emulator, under each variant."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import requests

from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, every_custom_job

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
PIPELINE = dict(job_type="training_pipeline", model_display_name="nightly-model",
                model_serving_image_uri="us-docker.pkg.dev/vertex-ai/prediction/pytorch-cpu.2-4:latest")
EAST = "us-east4"


@pytest.fixture
def airflow(airflow_db, vertex_conn):
    return vertex_conn


def _operator(plan, **kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                               base_output_dir="gs://bucket/pipelines", plan=plan,
                               **{"poll_interval": 0.02, **A100, **PIPELINE, **kw})


def _pipelines(emulator, location: str = LOCATION) -> list[dict]:
    return requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{location}/trainingPipelines",
                        timeout=5).json().get("trainingPipelines", [])


@pytest.mark.parametrize("running", ["job_created", "job_running"])
def test_a_bounded_flex_start_pipeline_whose_job_never_runs_is_cancelled_at_its_bound(airflow, running):
    """The pipeline says RUNNING (job_created) while its job waits QUEUED: cancelled at its
    capacity_wait_timeout, and the plan moves on (was: the bound never fired)."""
    from airflow.sdk import DAG

    airflow.reset({**FAST, "variants": {"pipelineRunning": running}})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG(f"pipeline_bound_{running}", schedule=None, start_date=START) as dag:
        _operator([{"strategy": "FLEX_START", "max_wait_duration": "2h", "capacity_wait_timeout": 1},
                   {"strategy": "STANDARD"}])
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    attempts = training["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts] == [
        ("FLEX_START", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert attempts[0]["running_since"] is None and attempts[0]["gpu_hours"] == 0  # its job never ran
    assert attempts[1]["running_since"] is not None and attempts[1]["run_seconds"] > 0
    states = sorted(p["state"] for p in _pipelines(airflow))
    assert states == ["PIPELINE_STATE_CANCELLED", "PIPELINE_STATE_SUCCEEDED"]
    assert sorted(j["state"] for j in every_custom_job(airflow)) == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"]


@pytest.mark.parametrize("running", ["job_created", "job_running"])
def test_a_race_of_two_pipelines_picks_the_member_whose_job_runs(airflow, running):
    """Member 0's pipeline says RUNNING first, its job waiting for FLEX_START capacity that never
    comes; member 1's job runs: member 1 wins (was: member 0 won, member 1 was cancelled)."""
    from airflow.sdk import DAG

    airflow.reset({**FAST, "variants": {"pipelineRunning": running}})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG(f"pipeline_race_{running}", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START", "max_wait_duration": "10m"},
                             {"strategy": "SPOT", "locations": [EAST]}]}])
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    assert training["strategy"] == "SPOT" and training["attempts"][-1]["location"] == EAST
    assert [a.get("race") for a in training["attempts"]] == ["lost", "won"]
    assert training["attempts"][0]["gpu_hours"] == 0 and training["attempts"][0]["running_since"] is None
    assert [p["state"] for p in _pipelines(airflow)] == ["PIPELINE_STATE_CANCELLED"]
    assert [p["state"] for p in _pipelines(airflow, EAST)] == ["PIPELINE_STATE_SUCCEEDED"]


@pytest.mark.parametrize("running", ["trial_running", "trial_created"])
def test_a_tuning_job_whose_first_trial_waits_is_cancelled_at_its_bound(airflow, running):
    """A tuning job RUNNING as soon as its trial exists (trial_created) is bounded by its trial's
    job, as under trial_running (was: never cancelled under trial_created)."""
    from airflow_gpu_sched.operators import FlexStartTrainingOperator
    from airflow_gpu_sched.orchestration.errors import CapacityWaitExpired

    airflow.reset({**FAST, "variants": {"tuningRunning": running}})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)  # no trial can start
    op = FlexStartTrainingOperator(
        task_id="tune", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1", poll_interval=0.02,
        max_wait_duration="10m", capacity_wait_timeout=1, deferrable=False,
        job_type="hyperparameter_tuning_job", max_trial_count=2, parallel_trial_count=1,
        study_spec={"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
                    "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1}}]},
        **A100)
    with pytest.raises(CapacityWaitExpired, match="not RUNNING within its bound"):
        op.execute({})
    tuning = requests.get(f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/hyperparameterTuningJobs",
                          timeout=5).json()["hyperparameterTuningJobs"]
    assert [t["state"] for t in tuning] == ["JOB_STATE_CANCELLED"]
    assert set(airflow.stats()["jobsByState"]) == {"JOB_STATE_CANCELLED"}  # its trial too: no orphan
