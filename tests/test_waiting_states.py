"""Issue 40: every waiting state is bounded, PAUSED is handled, and a job the service cancelled at
its ``scheduling.timeout`` fails as a timeout even when no poll saw it RUNNING. Through
``dag.test()`` against the emulator (its control API puts a job in PAUSED or in a state this code
does not know: ``POST /emulator/v1/{job}:setState``)."""

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
                               **{"poll_interval": 0.05, **A100, **kw})


def test_a_job_the_service_cancelled_at_its_timeout_unseen_running_fails_as_a_timeout(airflow):
    """timeoutOutcome cancelled, a poll interval longer than the whole run: no poll sees RUNNING,
    the service's startTime/endTime tell the timeout (was: "cancelled outside this task")."""
    from airflow.sdk import DAG

    airflow.reset({**FAST, "speed": 100000, "variants": {"timeoutOutcome": "cancelled"}})
    with DAG("timeout_unseen", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "SPOT"}, {"strategy": "STANDARD"}], timeout="10m", poll_interval=1.0,
                  env={"EMULATOR_RUN_SECONDS": "1000000"})
    result = run_dag(dag, logical_date=START)
    assert result["train"].state == "failed"
    ledger = str(result.task_state_store["train"][LEDGER_KEY])
    assert "TrainingJobTimedOut" in ledger and "cancelled outside" not in ledger
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1}  # a timeout does not move the plan on
    assert airflow.stats()["cancels"] == 0  # the service's cancel, not ours
