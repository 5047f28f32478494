"""Failed nights in the UI plugin (issue 25): a task that fails pushes its attempts and the error
(XCom ``training_failure``) before it raises, and the plugin shows it: through ``dag.test()``
against the emulator, one run failing for user code and one on its deadline."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_gpu_sched.orchestration.failure_record import FAILURE_KEY, env_values, scrub
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
SECRET = "planted-s3cret-value-4711"  # in the job's env: must reach no XCom


def user_code_failure_dag():
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG("nightly_user_code", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                            poll_interval=0.02, retries=0, plan=[{"strategy": "SPOT"}],
                            env={"EMULATOR_EXIT_CODE": "1", "HF_TOKEN": SECRET}, **A100)
    return dag


def deadline_dag():
    """SPOT finds no capacity (its bound before RUNNING runs out), and by then too little is left
    before the deadline (expected run time 1 h; deadline 1 h 40 s away) for FLEX_START's minimum wait."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    deadline = datetime.now(timezone.utc) + timedelta(hours=1, seconds=40)
    with DAG("nightly_deadline", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                            poll_interval=0.02, retries=0, deadline=deadline, expected_run_time="1h",
                            plan=[{"strategy": "SPOT", "capacity_wait_timeout": 0.5},
                                  {"strategy": "FLEX_START", "max_wait_duration": "2h"}], **A100)
    return dag


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def run_failing_nights(emulator):
    """Both DAGs, each run once: (user-code run, deadline run)."""
    user = run_dag(user_code_failure_dag(), logical_date=START)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    late = run_dag(deadline_dag(), logical_date=START)
    return user, late


def test_a_failed_try_pushes_its_attempts_and_the_error_and_no_secret(airflow):
    user, late = run_failing_nights(airflow)
    assert user["train"].state == "failed" and late["train"].state == "failed"
    record = user["train"].xcoms[FAILURE_KEY]
    failure = record["failure"]
    assert failure["kind"] == "TrainingJobFailedNoRetry" and failure["try_number"] == 1
    assert failure["job_name"].startswith(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/")
    assert failure["console_url"].startswith("https://console.cloud.google.com/vertex-ai/")
    assert set(failure["links"]) == {"custom_job", "logs"}
    assert [(a["strategy"], a["state"]) for a in record["attempts"]] == [("SPOT", "JOB_STATE_FAILED")]
    assert "return_value" not in user["train"].xcoms  # the failure is not a result
    every_xcom = json.dumps(user["train"].xcoms)
    assert SECRET not in every_xcom

    record = late["train"].xcoms[FAILURE_KEY]
    assert record["failure"]["kind"] == "DeadlineExceeded"
    assert "FLEX_START" in record["failure"]["message"] and "deadline" in record["failure"]["message"]
    assert [(a["strategy"], a["job_name"] is not None) for a in record["attempts"]] == [("SPOT", True)]


def test_a_failed_job_s_texts_lose_every_env_value_of_the_job():
    wire = {"jobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": [{"name": "A", "value": SECRET},
                                                                       {"name": "B", "value": "1"}]}}, {}]},
            "trialJobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": [{"name": "C", "value": "abcdef"}]}}]}}
    assert env_values(wire) == {SECRET, "1", "abcdef"}
    text = f"Traceback: token={SECRET} step 1 of abcdefg"
    assert scrub(text, env_values(wire)) == "Traceback: token=*** step 1 of ***g"
    assert scrub("x" * 9000, [])[-5:] == "[cut]"
