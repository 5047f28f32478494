"""Airflow 3.3 as deployed (4 processes, LocalExecutor, PostgreSQL) against the emulator.

Assertions are made against the emulator's own records (what Vertex would have seen), not only
against what Airflow says.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, pg_available

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "dags"
FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
DAG_ID = "e2e_training"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    root = tmp_path_factory.mktemp("e2e")
    dags = root / "dags"
    dags.mkdir()
    for dag_file in DAGS.glob("*.py"):
        shutil.copy(dag_file, dags / dag_file.name)
    with EmulatorServer() as emulator, PostgresCluster() as pg:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)}
        with AirflowDeployment(root / "home", pg.url, dags, env) as airflow:
            airflow.emulator = EmulatorControl(emulator.url)
            yield airflow


@pytest.fixture
def airflow(deployment):
    deployment.emulator.reset(FAST)
    return deployment


def _jobs(emulator: EmulatorControl) -> list[dict]:
    response = emulator._session.get(f"{emulator.url}/v1/projects/e2e-project/locations/us-central1/customJobs",
                                     timeout=10)
    response.raise_for_status()
    return response.json().get("customJobs", [])


def _check_one_succeeded_job(airflow: AirflowDeployment, run_id: str, state: str) -> None:
    emulator = airflow.emulator
    assert state == "success", f"run {run_id} ended {state}\n{airflow.logs()[-20000:]}"
    stats = emulator.stats()
    assert stats["jobsCreated"] == {"FLEX_START": 1}, stats
    jobs = _jobs(emulator)
    assert [job["state"] for job in jobs] == ["JOB_STATE_SUCCEEDED"], jobs
    ti = {t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}["train"]
    assert ti["state"] == "success" and ti["try_number"] == 1, ti


def test_flex_start_training_succeeds(airflow):
    run_id = airflow.trigger(DAG_ID)
    state = airflow.wait(DAG_ID, run_id, timeout=180)
    _check_one_succeeded_job(airflow, run_id, state)
    assert airflow.emulator.stats()["cancels"] == 0


def test_triggerer_killed_while_deferred(airflow):
    # a 25-minute emulated queue (15 s real at 100x): the kill lands while the job waits for GPUs
    airflow.emulator.reset({**FAST, "queueSeconds": 1500})
    run_id = airflow.trigger(DAG_ID)
    airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=120)
    time.sleep(2)  # let the triggerer pick the trigger up and poll at least once
    jobs = _jobs(airflow.emulator)
    assert [job["state"] for job in jobs] == ["JOB_STATE_QUEUED"], jobs  # still waiting for GPUs
    airflow.kill("triggerer")
    time.sleep(3)
    ti = {t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}["train"]
    assert ti["state"] == "deferred", ti  # nobody watches the job now
    airflow.start("triggerer")
    state = airflow.wait(DAG_ID, run_id, timeout=240)
    _check_one_succeeded_job(airflow, run_id, state)
    assert airflow.emulator.stats()["cancels"] == 0


def test_a_deferred_task_marked_failed_cancels_its_job(airflow):
    airflow.emulator.reset({**FAST, "queueSeconds": 100_000})  # the job waits for GPUs for ever
    run_id = airflow.trigger(DAG_ID)
    airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=120)
    time.sleep(2)
    assert [job["state"] for job in _jobs(airflow.emulator)] == ["JOB_STATE_QUEUED"]
    airflow.api("PATCH", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train",
                json={"new_state": "failed"})
    deadline = time.monotonic() + 30  # the trigger's on_kill cancels within a couple of poll intervals
    while _jobs(airflow.emulator)[0]["state"] not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"):
        assert time.monotonic() < deadline, f"job not cancelled\n{airflow.logs()[-20000:]}"
        time.sleep(0.5)
    assert airflow.emulator.stats()["cancels"] == 1


def test_api_faults_and_lost_responses_still_make_one_job_per_run(airflow):
    # 20 % of Vertex responses are 429/503 with added latency; half of those come after the
    # request was carried out (a lost response: an ambiguous create that did make its job).
    airflow.emulator.set_faults(error_rate=0.2, status_codes=[429, 503], latency_seconds=0.02,
                                after_handler_rate=0.5)
    run_ids = [airflow.trigger(DAG_ID) for _ in range(3)]
    states = [airflow.wait(DAG_ID, run_id, timeout=240) for run_id in run_ids]
    assert states == ["success"] * 3, airflow.logs()[-20000:]
    stats = airflow.emulator.stats()
    assert stats["faultsInjected"] > 0
    airflow.emulator.clear_faults()
    jobs = _jobs(airflow.emulator)
    keys = [job["labels"]["gpu-sched-submission"] for job in jobs]
    assert len(jobs) == 3 and len(set(keys)) == 3, jobs  # one job per training run, none duplicated
    assert all(job["state"] == "JOB_STATE_SUCCEEDED" for job in jobs)


def test_fifty_mapped_training_tasks_wait_at_once_and_all_complete(airflow):
    airflow.emulator.reset({**FAST, "queueSeconds": 3000})  # 30 s of real waiting: all of them defer meanwhile
    airflow.wait_dag("e2e_mapped")
    run_id = airflow.trigger("e2e_mapped")
    state = airflow.wait("e2e_mapped", run_id, timeout=600)
    assert state == "success", airflow.logs()[-20000:]
    tis = airflow.task_instances("e2e_mapped", run_id)
    assert len(tis) == 50 and {t["state"] for t in tis} == {"success"}
    jobs = _jobs_all(airflow.emulator)
    assert len(jobs) == 50 and {j["state"] for j in jobs} == {"JOB_STATE_SUCCEEDED"}
    assert len({j["labels"]["airflow-map-index"] for j in jobs}) == 50
    requests = airflow.emulator.stats()["requests"]
    # one shared poller in the triggerer: ~30 s of waiting polled per task each second would be
    # over 1,500 GETs; the poller lists them together and GETs only what it cannot see
    assert requests.get("customJobs.list", 0) > 0 and requests.get("customJobs.get", 0) < 500, requests


def _jobs_all(emulator: EmulatorControl) -> list[dict]:
    url = f"{emulator.url}/v1/projects/e2e-project/locations/us-central1/customJobs"
    return emulator._session.get(url, params={"pageSize": 1000}, timeout=10).json().get("customJobs", [])


def test_two_triggerers_share_the_work_and_still_make_one_job_per_run(airflow):
    airflow.start("triggerer#2")
    try:
        airflow.emulator.reset({**FAST, "queueSeconds": 500})  # 5 s of waiting: every task is deferred
        run_ids = [airflow.trigger(DAG_ID) for _ in range(4)]
        states = [airflow.wait(DAG_ID, run_id, timeout=300) for run_id in run_ids]
        assert states == ["success"] * 4, airflow.logs()[-20000:]
        jobs = _jobs(airflow.emulator)
        assert len(jobs) == 4 and len({j["labels"]["gpu-sched-submission"] for j in jobs}) == 4
        assert {j["state"] for j in jobs} == {"JOB_STATE_SUCCEEDED"} and airflow.emulator.stats()["cancels"] == 0
        assert airflow.procs["triggerer#2"].poll() is None and airflow.procs["triggerer"].poll() is None
    finally:
        airflow.terminate("triggerer#2")


def test_a_deferred_task_cleared_cancels_its_job(airflow):
    airflow.emulator.reset({**FAST, "queueSeconds": 100_000})  # jobs wait for GPUs for ever
    run_id = airflow.trigger(DAG_ID)
    airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=120)
    time.sleep(2)
    airflow.api("POST", f"dags/{DAG_ID}/clearTaskInstances",
                json={"dry_run": False, "task_ids": ["train"], "dag_run_id": run_id, "only_failed": False})
    deadline = time.monotonic() + 30  # the trigger's on_kill cancels the job
    while sorted(_jobs(airflow.emulator), key=lambda j: j["name"])[0]["state"] not in (
            "JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"):
        assert time.monotonic() < deadline, f"job not cancelled\n{airflow.logs()[-20000:]}"
        time.sleep(0.5)
    assert airflow.emulator.stats()["cancels"] == 1
