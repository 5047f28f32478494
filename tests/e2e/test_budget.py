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


def _hold_gpus(airflow: AirflowDeployment) -> None:
    """No FLEX_START GPUs until :func:`_release_gpus`: no admitted task ends (and frees what it did
    not spend) before every task of the run has decided, so exactly ADMITTED hold."""
    airflow.emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=0)


def _release_gpus(airflow: AirflowDeployment) -> None:
    airflow.emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=8)


def _wait_all_decided(airflow: AirflowDeployment, run_id: str, retried: int | None = None) -> dict[int, dict]:
    """Every task has decided: refused ones failed, admitted ones deferred on their queued job
    (``retried``: that one on try 2). A hang guard, not a measure."""
    deadline = time.monotonic() + 400
    while True:
        tis = {t["map_index"]: t for t in airflow.all_task_instances(DAG_ID, run_id)}
        if len(tis) == TASKS and all(t["state"] in ("failed", "deferred") for t in tis.values()) and \
                (retried is None or tis[retried]["try_number"] == 2):
            return tis
        assert time.monotonic() < deadline, f"not all decided: {tis}\n{airflow.why(DAG_ID, run_id)}"
        assert "success" not in {t["state"] for t in tis.values()}, airflow.why(DAG_ID, run_id)  # GPUs are held
        time.sleep(1)


def _check_decided(airflow: AirflowDeployment, run_id: str, tis: dict[int, dict]) -> list[int]:
    """While every admitted job waits for GPUs: exactly ADMITTED tasks deferred with one job each,
    the rest failed with BudgetExceeded on try 1 without a job; the admitted map indexes."""
    admitted = sorted(i for i, t in tis.items() if t["state"] == "deferred")
    refused = sorted(i for i, t in tis.items() if t["state"] == "failed")
    assert len(admitted) == ADMITTED, (admitted, airflow.why(DAG_ID, run_id))  # exactly as many as fit
    assert {tis[i]["try_number"] for i in refused} == {1}  # an AirflowFailException: no retry
    jobs = [j for j in _jobs(airflow.emulator) if j["labels"].get("airflow-run") == label_value(run_id)]
    assert sorted(int(j["labels"]["airflow-map-index"]) for j in jobs) == admitted, jobs  # one job each
    assert {j["state"] for j in jobs} == {"JOB_STATE_QUEUED"}, jobs
    for index in refused:
        log = _log(airflow, run_id, index, 1)
        assert "BudgetExceeded" in log and "a reservation of 2 was refused" in log, log[-3000:]
        assert "run budget 'night'" in log and "rest of 7" in log, log[-3000:]
        assert "customJobs/" not in log, log[-3000:]  # asked for no GPUs
    return admitted


def _check_ended(airflow: AirflowDeployment, run_id: str, admitted: list[int]) -> None:
    """Once the GPUs are given: the admitted tasks succeed on their one job, the run fails (the refused)."""
    state = airflow.wait(DAG_ID, run_id, timeout=300)
    assert state == "failed", f"run {run_id} ended {state}\n{airflow.why(DAG_ID, run_id)}"
    tis = airflow.all_task_instances(DAG_ID, run_id)
    assert sorted(t["map_index"] for t in tis if t["state"] == "success") == admitted, airflow.why(DAG_ID, run_id)
    jobs = [j for j in _jobs(airflow.emulator) if j["labels"].get("airflow-run") == label_value(run_id)]
    assert len(jobs) == ADMITTED and {j["state"] for j in jobs} == {"JOB_STATE_SUCCEEDED"}, jobs


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
    job). A second run of the DAG has its own 7.0: 3 more jobs, its own 3 reservations. A task
    of it cleared after it succeeded reserves anew on top of what it spent."""
    started = time.monotonic()
    emulator = airflow.emulator
    emulator.reset(FAST)
    _hold_gpus(airflow)
    before = _reservations(airflow)
    run_id = airflow.trigger(DAG_ID)
    pid, job_name, stalled = _wait_for_stall(airflow, run_id)
    [stalled_key] = [k for k in _reservations(airflow) if k not in before and k.endswith(f".train.{stalled}")]
    stamp = _reservations(airflow)[stalled_key]["at"]
    assert [j["name"] for j in _jobs(emulator) if j["labels"].get("airflow-map-index") == str(stalled)] == [job_name]
    os.kill(pid, signal.SIGKILL)  # the job exists, the task has not deferred
    admitted = _check_decided(airflow, run_id, _wait_all_decided(airflow, run_id, retried=stalled))
    assert stalled in admitted
    first = {k: v for k, v in _reservations(airflow).items() if k not in before}
    assert sorted(int(k.rsplit(".", 1)[1]) for k in first) == admitted, first  # the refused deleted theirs
    assert sum(v["amount"] for v in first.values()) <= LIMIT  # what the holders hold fits: no double spend
    assert first[stalled_key]["at"] == stamp  # the retry kept its reservation: same key, same place
    retry = _log(airflow, run_id, stalled, 2)
    assert f"re-attaching to {job_name}" in retry and "refused" not in retry, retry[-3000:]
    _release_gpus(airflow)
    _check_ended(airflow, run_id, admitted)
    first = {k: v for k, v in _reservations(airflow).items() if k not in before}
    _check_reservations(first, admitted)
    assert first[stalled_key]["at"] == stamp
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": ADMITTED}  # the retry created no second job
    first_run = time.monotonic() - started

    # a second run of the DAG: its own budget (its own reservations), the first run's untouched
    _hold_gpus(airflow)
    run_2 = airflow.trigger(DAG_ID)
    admitted_2 = _check_decided(airflow, run_2, _wait_all_decided(airflow, run_2))
    _release_gpus(airflow)
    _check_ended(airflow, run_2, admitted_2)
    second = {k: v for k, v in _reservations(airflow).items() if k not in before and k not in first}
    _check_reservations(second, admitted_2)
    assert len({k.rsplit(".", 2)[0] for k in first}) == len({k.rsplit(".", 2)[0] for k in second}) == 1
    assert {k.rsplit(".", 2)[0] for k in first} != {k.rsplit(".", 2)[0] for k in second}  # its own budget
    assert {k: v for k, v in _reservations(airflow).items() if k in first} == first  # the first run's untouched
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 2 * ADMITTED}
    second_run = time.monotonic() - started - first_run

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
    print(f"\n[{airflow.executor}] first run (with the kill) {first_run:.0f} s, second run {second_run:.0f} s, "
          f"all {time.monotonic() - started:.0f} s")
