"""A hedged race in Airflow as deployed (4 processes, LocalExecutor, PostgreSQL) against the
emulator: a triggerer restart while every member queues cancels nothing and keeps watching all
of them; the member that gets capacity wins and the other is cancelled; a race task marked
failed or cleared while it defers cancels every member (a clear then races anew). Asserted on
the emulator's own records."""

from __future__ import annotations

import json
import time

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available

pytestmark = pytest.mark.e2e

# 10x, not the 100x of test_deployed.py: the FLEX_START member's 1 h max wait is 6 min real, longer
# than any hold here. At 100x it was 36 s real, which a loaded machine spent between the members'
# creates and the triggerer's restart: the member timed out instead of being cancelled by the win.
SLOW = {"seed": 1, "speed": 10, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
DAG_ID = "e2e_race"
REGIONS = ("us-central1", "us-east4")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    root = tmp_path_factory.mktemp("e2e_race")
    dags = dags_folder(root, ("e2e_race.py", "_e2e_task.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        with AirflowDeployment(root / "home", pg.url, dags,
                               {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)}) as deployment:
            deployment.emulator = EmulatorControl(emulator.url)
            deployment.emulator.reset(SLOW)
            yield deployment


def _jobs(emulator: EmulatorControl) -> list[dict]:
    found = []
    for region in REGIONS:
        response = emulator._session.get(f"{emulator.url}/v1/projects/e2e-project/locations/{region}/customJobs",
                                         timeout=10)
        response.raise_for_status()
        found += response.json().get("customJobs", [])
    return found


def test_a_triggerer_restart_mid_race_keeps_watching_every_member_then_one_wins(airflow):
    """A triggerer restart while both members queue cancels nothing; then the member whose region
    gets capacity wins and the other is cancelled: two jobs, one SUCCEEDED, one CANCELLED."""
    emulator = airflow.emulator
    emulator.reset(SLOW)
    emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=0)
    emulator.set_capacity("us-east4", "NVIDIA_TESLA_A100", spot=0)
    airflow.wait_dag(DAG_ID)
    run_id = airflow.trigger(DAG_ID)
    airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=180)
    deadline = time.monotonic() + 60
    while len(_jobs(emulator)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sorted(j["state"] for j in _jobs(emulator)) == ["JOB_STATE_QUEUED"] * 2
    airflow.restart("triggerer")
    time.sleep(5)  # the new triggerer picks the trigger up again
    assert sorted(j["state"] for j in _jobs(emulator)) == ["JOB_STATE_QUEUED"] * 2  # a restart cancels nothing
    emulator.set_capacity("us-east4", "NVIDIA_TESLA_A100", spot=8)
    state = airflow.wait(DAG_ID, run_id, timeout=240)
    assert state == "success", airflow.logs()[-6000:]
    jobs = {j["name"].split("/")[3]: j for j in _jobs(emulator)}
    assert jobs["us-east4"]["state"] == "JOB_STATE_SUCCEEDED"
    assert jobs["us-central1"]["state"] == "JOB_STATE_CANCELLED"
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1}


def _wait_for_members(airflow: AirflowDeployment, run_id: str) -> list[dict]:
    """Both members created and queued while the race task defers."""
    airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=180)
    deadline = time.monotonic() + 60
    while len(_jobs(airflow.emulator)) < 2:
        assert time.monotonic() < deadline, f"the race made {len(_jobs(airflow.emulator))} member(s)"
        time.sleep(0.5)
    jobs = _jobs(airflow.emulator)
    assert sorted(j["state"] for j in jobs) == ["JOB_STATE_QUEUED"] * 2, jobs
    _wait_for_trigger(airflow, run_id)
    return jobs


def _wait_for_trigger(airflow: AirflowDeployment, run_id: str) -> None:
    """A triggerer runs the race's trigger (Airflow calls on_kill only on a running trigger; a task
    failed before any triggerer took it leaves its jobs to `airflow-gpu-sched jobs orphans`)."""
    deadline = time.monotonic() + 60
    while not (({t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}["train"].get("trigger") or {})
               .get("triggerer_id")):
        assert time.monotonic() < deadline, "no triggerer took the race's trigger"
        time.sleep(0.5)
    time.sleep(2)  # and it has started watching (as scenario 4a of test_deployed.py waits)


def _wait_until_cancelled(airflow: AirflowDeployment, names: set[str]) -> None:
    deadline = time.monotonic() + 45  # the trigger's on_kill cancels within a few poll intervals
    while True:
        states = {j["name"]: j["state"] for j in _jobs(airflow.emulator) if j["name"] in names}
        if all(s in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED") for s in states.values()):
            return
        assert time.monotonic() < deadline, f"members not cancelled: {states}\n{airflow.logs()[-6000:]}"
        time.sleep(0.5)


def test_a_race_task_marked_failed_while_deferred_cancels_every_member(airflow):
    """A deferred race task marked failed from the REST API: the trigger's on_kill cancels both
    queued members (one cancel each), and nothing is submitted again."""
    emulator = airflow.emulator
    emulator.reset({**SLOW, "queueSeconds": 100_000})  # neither member ever gets GPUs
    run_id = airflow.trigger(DAG_ID)
    members = {j["name"] for j in _wait_for_members(airflow, run_id)}
    airflow.api("PATCH", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _wait_until_cancelled(airflow, members)
    time.sleep(3)  # a late resubmission would show up here
    assert {j["name"] for j in _jobs(emulator)} == members
    assert emulator.stats()["cancels"] == 2


def test_a_race_task_cleared_while_deferred_cancels_every_member_and_races_anew(airflow):
    """Clearing a deferred race task cancels both members (the trigger's on_kill); the rerun
    (try 2) runs a new race: two new members under new submission keys, none re-attached to a
    cancelled one."""
    emulator = airflow.emulator
    emulator.reset({**SLOW, "queueSeconds": 100_000})
    run_id = airflow.trigger(DAG_ID)
    first = _wait_for_members(airflow, run_id)
    airflow.api("POST", f"dags/{DAG_ID}/clearTaskInstances",
                json={"dry_run": False, "task_ids": ["train"], "dag_run_id": run_id, "only_failed": False})
    _wait_until_cancelled(airflow, {j["name"] for j in first})
    deadline = time.monotonic() + 90
    while len(_jobs(emulator)) < 4:
        ti = {t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}["train"]
        assert ti["state"] not in ("failed", "success") and time.monotonic() < deadline, \
            f"no new race: {ti}\n{airflow.task_events(DAG_ID, run_id)}"
        time.sleep(0.5)
    assert airflow.wait_task_state(DAG_ID, run_id, "train", {"deferred"}, timeout=60) == "deferred"
    jobs = _jobs(emulator)
    new = [j for j in jobs if j["name"] not in {f["name"] for f in first}]
    assert len(jobs) == 4 and sorted(j["state"] for j in new) == ["JOB_STATE_QUEUED"] * 2, jobs
    keys = [j["labels"]["gpu-sched-submission"] for j in jobs]
    assert len(set(keys)) == 4, keys  # every member of both races under its own key
    ti = {t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}["train"]
    assert ti["try_number"] == 2, ti
    _wait_for_trigger(airflow, run_id)
    airflow.api("PATCH", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _wait_until_cancelled(airflow, {j["name"] for j in new})
