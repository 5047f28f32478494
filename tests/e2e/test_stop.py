"""Stop means stop, deployed (issue 37): Airflow as deployed (LocalExecutor, PostgreSQL, a real
triggerer) against the emulator; a task whose plan is [FLEX_START with no GPUs, SPOT with GPUs]
is marked failed from the REST API while its FLEX_START job waits: deferred (the triggerer's
trigger is killed, its on_kill cancels) and in sync mode (the supervisor sends SIGTERM, the
operator's on_kill cancels). Either way the job is cancelled and nothing else is created:
asserted on the emulator's own record of creates once the task has ended and its process or
trigger is gone."""

from __future__ import annotations

import json
import time

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available

pytestmark = pytest.mark.e2e

# 10x: the FLEX_START job's 23 h wait is far beyond the test; cancels land in a poll or two
SLOW = {"seed": 1, "speed": 10, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
REGIONS = ("us-central1", "us-east4")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    root = tmp_path_factory.mktemp("e2e_stop")
    dags = dags_folder(root, ("e2e_stop.py", "_e2e_task.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        with AirflowDeployment(root / "home", pg.url, dags,
                               {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)}) as deployment:
            deployment.emulator = EmulatorControl(emulator.url)
            yield deployment


def _jobs(emulator: EmulatorControl) -> list[dict]:
    found = []
    for region in REGIONS:
        response = emulator._session.get(f"{emulator.url}/v1/projects/e2e-project/locations/{region}/customJobs",
                                         timeout=10)
        response.raise_for_status()
        found += response.json().get("customJobs", [])
    return found


def _until(predicate, what: str, airflow: AirflowDeployment, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout  # a hang guard on a loaded machine, not a speed limit
    while not predicate():
        assert time.monotonic() < deadline, f"{what}\n{airflow.logs()[-8000:]}"
        time.sleep(0.5)


@pytest.mark.parametrize("dag_id,waiting", [("e2e_stop_deferred", "deferred"), ("e2e_stop_sync", "running")])
def test_a_task_marked_failed_while_flex_start_waits_creates_no_other_job(airflow, dag_id, waiting):
    emulator = airflow.emulator
    emulator.reset(SLOW)
    emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=0)  # SPOT in us-east4 has GPUs
    airflow.wait_dag(dag_id)
    run_id = airflow.trigger(dag_id)
    airflow.wait_task_state(dag_id, run_id, "train", {waiting}, timeout=180)
    _until(lambda: [j["state"] for j in _jobs(emulator)] == ["JOB_STATE_QUEUED"], "the FLEX_START job never queued",
           airflow)
    polled = emulator.stats()["requests"]
    _until(lambda: sum(emulator.stats()["requests"].get(k, 0) - polled.get(k, 0)
                       for k in ("customJobs.get", "customJobs.list")) >= 3, "nobody polls the job", airflow)
    airflow.api("PATCH", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _until(lambda: [j["state"] for j in _jobs(emulator)] == ["JOB_STATE_CANCELLED"], "the job was not cancelled",
           airflow)
    ti = lambda: {t["task_id"]: t for t in airflow.task_instances(dag_id, run_id)}["train"]  # noqa: E731
    _until(lambda: ti()["state"] == "failed" and not ti().get("trigger"), "the task did not end failed", airflow)
    if waiting == "deferred":  # the triggerer's on_kill cancelled; Airflow resumes nothing after it
        _until(lambda: "task killed by a user: cancelling" in airflow.logs(), "no trigger on_kill", airflow)
    else:  # the worker's process got SIGTERM and went on polling: it must end on the stop, not on a SPOT job
        _until(lambda: "the task was told to stop" in airflow.logs() or "SPOT" in emulator.stats()["jobsCreated"],
               "the sync task's process neither stopped nor went on", airflow)
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 1}, airflow.logs()[-8000:]
    logs = airflow.logs()
    assert "capacity never came" not in logs and "falling back to" not in logs, logs[-8000:]


def test_a_deferred_try_past_its_execution_timeout_cancels_its_job_and_creates_no_other(airflow):
    """``execution_timeout`` on a deferred task: the scheduler times the trigger out (the triggerer
    cancels it without ``on_kill``) and resumes the task with ``__fail__``: the resumed try cancels the
    job it left waiting, then fails with Airflow's TaskDeferralTimeout; no other job is created."""
    emulator = airflow.emulator
    emulator.reset(SLOW)
    emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=0)
    dag_id = "e2e_stop_timeout"
    airflow.wait_dag(dag_id)
    run_id = airflow.trigger(dag_id)
    airflow.wait_task_state(dag_id, run_id, "train", {"deferred"}, timeout=180)
    ti = lambda: {t["task_id"]: t for t in airflow.task_instances(dag_id, run_id)}["train"]  # noqa: E731
    _until(lambda: ti()["state"] in ("failed", "up_for_retry"), "the task did not time out", airflow, timeout=300)
    _until(lambda: [j["state"] for j in _jobs(emulator)] == ["JOB_STATE_CANCELLED"],
           "the job the timed-out try left waiting was not cancelled", airflow)
    assert ti()["state"] == "failed", ti()
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 1}, airflow.logs()[-8000:]
    logs = airflow.logs()
    assert "capacity never came" not in logs and "falling back to" not in logs, logs[-8000:]
