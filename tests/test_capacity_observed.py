"""Issue 21: "got capacity" from the states the pollers observed, never from startTime (real
Vertex sets it at admission, as the emulator now does by default). Through ``dag.test()``,
against the emulator. (The race in two regions: tests/test_races.py.)"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
import requests

from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)


@pytest.fixture
def airflow(airflow_db, vertex_conn):
    return vertex_conn


def _operator(**kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                               poll_interval=0.02, **{**A100, **kw})


def _gpus_30_minutes_after_the_create(airflow, collection: str) -> threading.Thread:
    """From a thread: 8 free A100s 30 emulated minutes after the first resource of ``collection``
    was created (counted from its createTime, whenever the thread sees it)."""

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = requests.get(f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/{collection}",
                                 timeout=5).json().get(collection, [])
            if found:
                created = datetime.fromisoformat(found[0]["createTime"].replace("Z", "+00:00"))
                now = datetime.fromisoformat(airflow._call("GET", "clock")["now"])
                airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=8,
                                     at_seconds=max(0.0, 1800 - (now - created).total_seconds()))
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_night_that_waited_30_minutes_reports_30_minutes_queued_and_no_gpu_hours_for_them(airflow):
    from airflow.sdk import DAG

    airflow.reset({**FAST, "speed": 1000})  # 30 emulated minutes in about 2 s
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)

    helper = _gpus_30_minutes_after_the_create(airflow, "customJobs")
    with DAG("night", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "FLEX_START", "max_wait_duration": "2h"}], env={"EMULATOR_RUN_SECONDS": "600"})
    result = run_dag(dag, logical_date=START)
    helper.join()
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    (attempt,) = training["attempts"]
    assert attempt["start_time"] is not None  # set at admission: it says nothing about capacity
    assert 1800 <= training["queued_seconds"] <= 1800 + 10 + 60  # the wait, provisioning, a poll's bound
    assert 540 <= training["run_seconds"] <= 600  # the run only: 10 min
    assert training["gpu_hours"] == pytest.approx(600 / 3600, abs=0.02)  # not 40 min of GPU time
    times = attempt["times"]  # streamed logs: Vertex's own RUNNING entry makes it exact; else a poll bounds it
    assert (times["source"], times["bound_seconds"]) == ("log", 0) if times["exact"] else times["source"] == "poll"
    assert training["times"]["exact"] is times["exact"] and training["times"]["bound_seconds"] >= 0


@pytest.mark.parametrize("running", ["job_created", "job_running"])
def test_a_pipeline_night_that_waited_30_minutes_reports_them_queued_whenever_the_pipeline_said_running(
        airflow, running):
    """Issue 40: a pipeline says RUNNING as soon as its backing job exists (job_created, observed):
    its queued and run seconds and GPU-hours read the backing job's RUNNING, not the pipeline's."""
    from airflow.sdk import DAG

    airflow.reset({**FAST, "speed": 1000, "variants": {"pipelineRunning": running}})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)

    helper = _gpus_30_minutes_after_the_create(airflow, "trainingPipelines")
    with DAG(f"pipeline_night_{running}", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "FLEX_START", "max_wait_duration": "2h"}], env={"EMULATOR_RUN_SECONDS": "600"},
                  job_type="training_pipeline", model_display_name="nightly-model",
                  model_serving_image_uri="us-docker.pkg.dev/vertex-ai/prediction/pytorch-cpu.2-4:latest")
    result = run_dag(dag, logical_date=START)
    helper.join()
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    assert 1800 <= training["queued_seconds"] <= 1800 + 10 + 60  # the wait, provisioning, a poll's bound
    assert 540 <= training["run_seconds"] <= 600 + 60  # the run (and the model's registration) only
    assert training["gpu_hours"] == pytest.approx(600 / 3600, abs=0.03)  # not 40 min of GPU time


def test_a_plan_whose_flex_start_step_google_ends_cancelled_moves_on(airflow):
    from airflow.sdk import DAG

    airflow.reset({**FAST, "speed": 1000, "variants": {"flexStartExpiry": "cancelled"}})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG("flex_cancelled", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "FLEX_START", "max_wait_duration": "10m"}, {"strategy": "STANDARD"}])
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"], a["outcome"]) for a in attempts] == [
        ("FLEX_START", "JOB_STATE_CANCELLED", "capacity_timeout"), ("STANDARD", "JOB_STATE_SUCCEEDED", "succeeded")]
    assert attempts[0]["gpu_hours"] == 0 and attempts[0]["running_since"] is None
    assert airflow.stats()["cancels"] == 0  # Google's cancel, not ours


@pytest.mark.parametrize("outcome", ["failed", "cancelled"])
def test_a_job_ended_at_its_timeout_fails_as_a_timeout(airflow, outcome):
    from airflow.sdk import DAG

    airflow.reset({**FAST, "variants": {"timeoutOutcome": outcome}})
    with DAG(f"timeout_{outcome}", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "SPOT"}, {"strategy": "STANDARD"}], timeout="300s",
                  env={"EMULATOR_RUN_SECONDS": "100000"})
    result = run_dag(dag, logical_date=START)
    assert result["train"].state == "failed"
    ledger = result.task_state_store["train"][LEDGER_KEY]
    assert "TrainingJobTimedOut" in str(ledger) and "cancelled outside" not in str(ledger)
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1}  # a timeout does not move the plan on
