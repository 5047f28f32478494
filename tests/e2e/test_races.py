"""A hedged race in Airflow as deployed (4 processes, LocalExecutor, PostgreSQL) against the
emulator: a triggerer restart while every member queues cancels nothing and keeps watching all
of them; the member that gets capacity wins and the other is cancelled. Asserted on the
emulator's own records."""

from __future__ import annotations

import json
import time

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available

pytestmark = pytest.mark.e2e

FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
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
            deployment.emulator.reset(FAST)
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
    emulator = airflow.emulator
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
