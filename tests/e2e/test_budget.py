"""A budget shared by the tasks of one DAG run (``run_budget=``, orchestration/run_budget.py) in
Airflow as deployed (PostgreSQL; scheduler, dag-processor, triggerer, api-server and the
executor's workers as separate processes) against the emulator.

dags/e2e_budget.py: 10 mapped tasks of one run, each reserving 2.0 (its dearest step: 2.0 USD
per A100-hour x 1 GPU x 1 h) of a 7.0 run budget, all at once. Asserted on the emulator's job
records and on the reservation Variables themselves: exactly 3 jobs (one per admitted task), the
other 7 tasks fail with ``BudgetExceeded`` before asking for GPUs (their log says why), what the
reservations hold fits the limit; an admitted task killed between create and defer keeps its
reservation on its retry (same key, same stamp, no second one, no second job); a second run of
the DAG has its own budget; a task of it cleared after it succeeded reserves anew on top of what
it spent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.orchestration.orphans import label_value
from airflow_gpu_sched.orchestration.run_budget import PREFIX
from tests.e2e.celery_deployment import CeleryDeployment, RedisServer, redis_available
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
DAG_ID = "e2e_budget"
TASKS, PRICE, LIMIT = 10, 2.0, 7.0  # as in dags/e2e_budget.py
ADMITTED = int(LIMIT // PRICE)  # 3: the first 3 reservations in stamp order hold, the rest are refused
EXECUTORS = [pytest.param("local", id="local"), pytest.param("celery", id="celery", marks=pytest.mark.celery)]


@pytest.fixture(scope="module", params=EXECUTORS)
def airflow(request, tmp_path_factory):
    executor = request.param
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    if executor == "celery" and not redis_available():
        pytest.skip("redis-server missing (the Celery broker): apt-get install -y redis-server")
    root = tmp_path_factory.mktemp(f"e2e-budget-{executor}")
    dags = dags_folder(root, ("e2e_budget.py", "_e2e_task.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg, contextlib.ExitStack() as stack:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)}
        if executor == "celery":
            redis = stack.enter_context(RedisServer(root / "redis"))
            deployed: AirflowDeployment = CeleryDeployment(root / "home", pg.url, dags, env, broker_url=redis.url)
        else:
            deployed = AirflowDeployment(root / "home", pg.url, dags, env)
        with deployed as deployment:
            deployment.emulator = EmulatorControl(emulator.url)
            deployment.emulator.reset(FAST)
            yield deployment


def _jobs(emulator: EmulatorControl) -> list[dict]:
    url = f"{emulator.url}/v1/projects/e2e-project/locations/us-central1/customJobs"
    response = emulator._session.get(url, params={"pageSize": 1000}, timeout=10)
    response.raise_for_status()
    return response.json().get("customJobs", [])


def _reservations(airflow: AirflowDeployment) -> dict[str, dict]:
    """Every run budget reservation Variable (key -> its JSON value), read over the REST API."""
    found: dict[str, dict] = {}
    offset = 0
    while True:
        page = airflow.api("GET", "variables", params={"limit": 100, "offset": offset})["variables"]
        found.update({v["key"]: json.loads(v["value"]) for v in page if v["key"].startswith(PREFIX + ".")})
        offset += len(page)
        if len(page) < 100:
            return found


def _of_run(reservations: dict[str, dict], run_prefix: str) -> dict[str, dict]:
    return {k: v for k, v in reservations.items() if k.startswith(run_prefix)}


def _log(airflow: AirflowDeployment, run_id: str, map_index: int, attempt: int) -> str:
    root = airflow.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=train" / f"map_index={map_index}"
    return "".join(p.read_text(errors="replace") for p in root.glob(f"attempt={attempt}*") if p.is_file())


def _wait_for_stall(airflow: AirflowDeployment, run_id: str) -> tuple[int, str, int]:
    """(pid, job name, map index) of the admitted task that stalls after its create on try 1."""
    marker = airflow.home / "e2e-markers" / "e2e_budget.pid"
    deadline = time.monotonic() + 300  # a hang guard: 10 tasks start and settle for 10 s each
    while not marker.exists() or len(marker.read_text().split()) < 4:
        assert time.monotonic() < deadline, f"no admitted task submitted\n{airflow.why(DAG_ID, run_id)}"
        assert airflow.run_state(DAG_ID, run_id) not in ("success", "failed"), airflow.why(DAG_ID, run_id)
        time.sleep(0.3)
    pid, job_name, marked_run, map_index = marker.read_text().split()
    assert marked_run == run_id
    return int(pid), job_name, int(map_index)


def _check_run(airflow: AirflowDeployment, run_id: str, state: str) -> list[int]:
    """The run's verdict: ADMITTED tasks succeeded with one job each, the rest failed with
    BudgetExceeded on try 1 without a job; the admitted map indexes."""
    assert state == "failed", f"run {run_id} ended {state}\n{airflow.why(DAG_ID, run_id)}"
    tis = airflow.all_task_instances(DAG_ID, run_id)
    assert len(tis) == TASKS, tis
    admitted = sorted(t["map_index"] for t in tis if t["state"] == "success")
    refused = sorted(t["map_index"] for t in tis if t["state"] != "success")
    assert len(admitted) == ADMITTED, (admitted, airflow.why(DAG_ID, run_id))  # exactly as many as fit
    assert {t["state"] for t in tis if t["map_index"] in refused} == {"failed"}
    assert {t["try_number"] for t in tis if t["map_index"] in refused} == {1}  # an AirflowFailException
    jobs = [j for j in _jobs(airflow.emulator) if j["labels"].get("airflow-run") == label_value(run_id)]
    assert sorted(int(j["labels"]["airflow-map-index"]) for j in jobs) == admitted, jobs  # one job each
    assert {j["state"] for j in jobs} == {"JOB_STATE_SUCCEEDED"}, jobs
    for index in refused:
        log = _log(airflow, run_id, index, 1)
        assert "BudgetExceeded" in log and "a reservation of 2 was refused" in log, log[-3000:]
        assert "run budget 'night'" in log and "rest of 7" in log, log[-3000:]
        assert "customJobs/" not in log, log[-3000:]  # asked for no GPUs
    return admitted


def _check_reservations(reservations: dict[str, dict], admitted: list[int]) -> None:
    """One reservation per admitted task (the refused deleted theirs), what they hold fits the limit,
    and each replaced by what its task really spent (no more than it reserved)."""
    assert sorted(int(k.rsplit(".", 1)[1]) for k in reservations) == admitted, reservations
    assert {k.rsplit(".", 2)[1] for k in reservations} == {"train"}
    assert all(v["amount"] == PRICE for v in reservations.values()), reservations
    assert sum(v["amount"] for v in reservations.values()) <= LIMIT  # no double spend
    assert all(v.get("spent") is not None and 0 <= v["spent"] <= v["amount"] for v in reservations.values()), \
        reservations  # settled when the task succeeded


def test_concurrent_tasks_of_one_run_share_its_budget_and_a_retry_keeps_its_reservation(airflow):
    """10 mapped tasks reserve at once: exactly 3 hold, 3 jobs; the other 7 fail with
    BudgetExceeded before asking for GPUs. The first admitted task is SIGKILLed between create
    and defer: its retry keeps its reservation (same key, same stamp) and re-attaches (no second
    job). A second run of the DAG has its own 7.0: 3 more jobs, its own 3 reservations."""
    started = time.monotonic()
    emulator = airflow.emulator
    emulator.reset(FAST)
    before = _reservations(airflow)
    run_id = airflow.trigger(DAG_ID)
    pid, job_name, stalled = _wait_for_stall(airflow, run_id)
    held = {k: v for k, v in _reservations(airflow).items() if k not in before}
    [stalled_key] = [k for k in held if k.endswith(f".train.{stalled}")]
    stamp = held[stalled_key]["at"]
    assert [j["name"] for j in _jobs(emulator) if j["labels"].get("airflow-map-index") == str(stalled)] == [job_name]
    os.kill(pid, signal.SIGKILL)  # the job exists, the task has not deferred
    state = airflow.wait(DAG_ID, run_id, timeout=600)
    admitted = _check_run(airflow, run_id, state)
    assert stalled in admitted
    ti = {t["map_index"]: t for t in airflow.all_task_instances(DAG_ID, run_id)}[stalled]
    assert ti["try_number"] == 2, ti  # try 1 was killed, try 2 finished the job
    retry = _log(airflow, run_id, stalled, 2)
    assert "refused" not in retry and "BudgetExceeded" not in retry, retry[-3000:]
    first = {k: v for k, v in _reservations(airflow).items() if k not in before}
    _check_reservations(first, admitted)
    assert first[stalled_key]["at"] == stamp  # the retry kept its reservation: same key, same place
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": ADMITTED}  # the retry created no second job
    first_run = time.monotonic() - started

    # a second run of the DAG: its own budget (its own reservations), the first run's untouched
    run_2 = airflow.trigger(DAG_ID)
    state = airflow.wait(DAG_ID, run_2, timeout=600)
    admitted_2 = _check_run(airflow, run_2, state)
    second = {k: v for k, v in _reservations(airflow).items() if k not in before and k not in first}
    _check_reservations(second, admitted_2)
    assert len({k.rsplit(".", 2)[0] for k in first}) == len({k.rsplit(".", 2)[0] for k in second}) == 1
    assert {k.rsplit(".", 2)[0] for k in first} != {k.rsplit(".", 2)[0] for k in second}  # its own budget
    assert {k: v for k, v in _reservations(airflow).items() if k in first} == first  # the first run's untouched
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 2 * ADMITTED}

    # an admitted task of the second run cleared after it succeeded runs again: it reserves anew on
    # top of what it spent (on main its key was kept as it was: the new run's money counted nowhere)
    cleared = admitted_2[0]
    [key] = [k for k in second if k.endswith(f".train.{cleared}")]
    airflow.api("POST", f"dags/{DAG_ID}/clearTaskInstances",
                json={"dry_run": False, "task_ids": [["train", cleared]], "dag_run_id": run_2, "only_failed": False})
    deadline = time.monotonic() + 300
    while True:
        ti = {t["map_index"]: t for t in airflow.all_task_instances(DAG_ID, run_2)}[cleared]
        if ti["try_number"] >= 2 and ti["state"] in ("success", "failed"):
            break
        assert time.monotonic() < deadline, f"the cleared task never ended: {ti}\n{airflow.why(DAG_ID, run_2)}"
        time.sleep(1)
    assert ti["state"] == "success", airflow.task_events(DAG_ID, run_2)[-5000:]
    again = _reservations(airflow)[key]
    assert again["at"] > second[key]["at"] and again["before"] == second[key]["spent"], (second[key], again)
    assert again["amount"] == second[key]["spent"] + PRICE and again["spent"] >= second[key]["spent"], again
    assert sum(v["amount"] for k, v in _reservations(airflow).items() if k in second) <= LIMIT
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 2 * ADMITTED + 1}
    print(f"\n[{airflow.executor}] first run (with the kill) {first_run:.0f} s, both runs "
          f"{time.monotonic() - started:.0f} s")
