"""Infrastructure faults under load (issue 24): 50 deferred training tasks (a mapped task,
dags/e2e_faults.py) on the deployed Airflow of tests/e2e/harness.py ([local]) and
tests/e2e/celery_deployment.py ([celery]), against the emulator, while a piece of the platform
fails: the triggerers crash under API faults, PostgreSQL restarts, Vertex is unreachable, the
Redis broker restarts, the task-log disk is full.

Each test asserts, on the emulator's own records: exactly one job per task try (a retry that
re-attaches makes none), every job ended (SUCCEEDED, or CANCELLED when a try gave it up), every
task's training ran once to success, and the DAG run's final state.

A component that exits on a fault (a scheduler whose database went away) is started again, as a
process supervisor (systemd, a Kubernetes restart policy) would; the test prints which.
Long (minutes each): ``make reliability`` runs them, ``make test`` does not.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import time

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.celery_deployment import CeleryDeployment, RedisServer, redis_available
from tests.e2e.harness import AirflowDeployment, PostgresCluster, SmallDisk, dags_folder, pg_available

pytestmark = [pytest.mark.e2e, pytest.mark.reliability, pytest.mark.timeout(2400)]

FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
DAG, TASKS, SPEED = "e2e_faults", 50, 100  # as in dags/e2e_faults.py; FAST's emulated speed
EXECUTORS = [pytest.param("local", id="local"), pytest.param("celery", id="celery", marks=pytest.mark.celery)]
ON_CELERY = pytest.mark.parametrize("deployment", [EXECUTORS[1]], indirect=True, scope="module")
ENDED = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}

# How long Vertex is unreachable in test_vertex_unreachable_while_jobs_run_then_back. The issue
# names 5 minutes; what the outage tests is the shared poller's backoff (triggers/poller.py:
# doubling from the 1 s poll interval, capped at MAX_BACKOFF = 120 s) and the transient-error
# window (10 min by default). 150 s of refused connections take every poller to its cap (the
# delays 2+4+...+64 s, times a 0.5-1 jitter, sum to 63-126 s), and a longer outage only repeats
# capped retries, so 150 s keeps the test at ~5 minutes. E2E_VERTEX_OUTAGE_SECONDS=300 runs the
# issue's figure (still inside the window: 300 s + at most one 120 s backoff < 600 s).
VERTEX_OUTAGE_SECONDS = float(os.environ.get("E2E_VERTEX_OUTAGE_SECONDS", "150"))


@pytest.fixture(scope="module", params=EXECUTORS)
def deployment(request, tmp_path_factory):
    """As in test_deployed.py, with the fault DAG only, and the PostgreSQL cluster and Redis
    server kept on the deployment (``airflow.pg``, ``airflow.redis``) for the tests to restart."""
    executor = request.param
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    if executor == "celery" and not redis_available():
        pytest.skip("redis-server missing (the Celery broker): apt-get install -y redis-server")
    root = tmp_path_factory.mktemp(f"faults-{executor}")
    dags = dags_folder(root, ("_e2e_task.py", "e2e_faults.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg, contextlib.ExitStack() as stack:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)}
        redis = None
        if executor == "celery":
            # a task whose broker message was lost with a Redis restart sits queued until this
            # (600 s by default), then the scheduler queues it again. Not on [local]: there a
            # task waiting for one of the 8 LocalExecutor slots counts as queued too, and 90 s
            # requeued 15 of the 50 before they ran (their first try failed: "Invalid auth token")
            env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT"] = "180"
            redis = stack.enter_context(RedisServer(root / "redis"))
            deployed = CeleryDeployment(root / "home", pg.url, dags, env, broker_url=redis.url)
        else:
            deployed = AirflowDeployment(root / "home", pg.url, dags, env)
        with deployed as airflow:
            airflow.emulator = EmulatorControl(emulator.url)
            airflow.emulator_server = emulator
            airflow.pg, airflow.redis = pg, redis
            yield airflow


@pytest.fixture
def airflow(deployment):
    _revive(deployment)  # an earlier test's fault must not carry over
    deployment.emulator.reset(FAST)
    # no GPUs until the test gives them: every task submits and defers with its job QUEUED
    deployment.emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=0)
    yield deployment
    with contextlib.suppress(Exception):
        deployment.emulator.clear_faults()


def _jobs(airflow: AirflowDeployment) -> list[dict]:
    url = f"{airflow.emulator.url}/v1/projects/e2e-project/locations/us-central1/customJobs"
    response = airflow.emulator._session.get(url, params={"pageSize": 1000}, timeout=30)
    response.raise_for_status()
    return response.json().get("customJobs", [])


def _release_gpus(airflow: AirflowDeployment) -> None:
    airflow.emulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", flex_start=TASKS)


def _wait_run(airflow: AirflowDeployment, run_id: str, timeout: float = 900.0, revive: bool = False) -> str:
    """The run's final state; with ``revive``, components that exit meanwhile are started again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if revive:
            _revive(airflow)
        with contextlib.suppress(Exception):  # the API server may answer 5xx while the database is away
            state = airflow.run_state(DAG, run_id)
            if state in ("success", "failed"):
                return state
        time.sleep(2)
    return "unknown"


def _revive(airflow: AirflowDeployment) -> None:
    revived = airflow.revive()
    if revived:
        print(f"{time.strftime('%H:%M:%S')} started again after they exited: {revived}")
        if "api-server" in revived:
            airflow.wait_api()


def _wait_jobs(airflow: AirflowDeployment, count: int, timeout: float = 600.0) -> None:
    """Until the emulator holds ``count`` jobs (tasks are submitting meanwhile)."""
    deadline = time.monotonic() + timeout
    while len(_jobs(airflow)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} jobs\n{airflow.logs()[-10000:]}"
        time.sleep(0.5)


def _check_one_job_per_try(airflow: AirflowDeployment, run_id: str, state: str) -> list[dict]:
    """The run succeeded, every task too; the emulator holds one job per (task, try) that
    submitted, every job ended, and each task's training SUCCEEDED exactly once (any other job
    of it, made by a try that gave it up, CANCELLED)."""
    assert state == "success", f"run ended {state}\n{airflow.why(DAG, run_id)}\n{airflow.logs()[-20000:]}"
    tis = airflow.all_task_instances(DAG, run_id)
    assert len(tis) == TASKS and {t["state"] for t in tis} == {"success"}, collections.Counter(t["state"] for t in tis)
    airflow.emulator.clear_faults()
    deadline = time.monotonic() + 120  # a cancel in flight (CANCELLING) ends within seconds emulated
    while not {j["state"] for j in _jobs(airflow)} <= ENDED and time.monotonic() < deadline:
        time.sleep(1)
    jobs = _jobs(airflow)
    assert {j["state"] for j in jobs} <= ENDED, collections.Counter(j["state"] for j in jobs)  # nothing left running
    per_try = collections.Counter((j["labels"]["airflow-map-index"], j["labels"]["airflow-try"]) for j in jobs)
    assert set(per_try.values()) == {1}, {k: n for k, n in per_try.items() if n > 1}  # one job per try
    assert len({j["labels"]["gpu-sched-submission"] for j in jobs}) == len(jobs)
    tries = {str(t["map_index"]): t["try_number"] for t in tis}
    by_task = collections.defaultdict(list)
    for job in jobs:
        by_task[job["labels"]["airflow-map-index"]].append(job)
    assert set(by_task) == set(tries), set(tries) ^ set(by_task)  # every task trained
    for index, its_jobs in by_task.items():
        assert all(int(j["labels"]["airflow-try"]) <= tries[index] for j in its_jobs), (tries[index], its_jobs)
        ended = sorted(j["state"] for j in its_jobs)
        assert ended == ["JOB_STATE_CANCELLED"] * (len(ended) - 1) + ["JOB_STATE_SUCCEEDED"], (index, its_jobs)
    retried = {i: n for i, n in tries.items() if n > 1}
    print(f"{len(jobs)} jobs for {TASKS} tasks; tasks that needed a retry (map index: tries): {retried}")
    return jobs


def _trigger(airflow: AirflowDeployment, conf: dict | None = None) -> str:
    airflow.wait_dag(DAG, timeout=300)
    return airflow.trigger(DAG, conf=conf)


def test_triggerers_sigkilled_while_the_api_injects_20_percent_faults(airflow):
    """Every triggerer is SIGKILLed while the 50 tasks wait deferred and 20 % of Vertex responses
    are 429/503 (half of the 503s after the request was carried out: lost responses, ambiguous
    creates among them); the jobs get their GPUs while nobody watches, the triggerers start
    again: the run succeeds, one job per task try, every job ended."""
    airflow.emulator.set_faults(error_rate=0.2, status_codes=[429, 503], latency_seconds=0.02,
                                after_handler_rate=0.5)
    run_id = _trigger(airflow)
    airflow.wait_task_instances(DAG, run_id, TASKS, {"deferred"}, timeout=1200)
    time.sleep(3)  # every trigger has polled through its triggerer's shared poller
    triggerers = [c for c, p in airflow.procs.items() if c.startswith("triggerer") and p.poll() is None]
    for triggerer in triggerers:
        airflow.kill(triggerer)
    _release_gpus(airflow)  # the jobs start, with no triggerer watching
    time.sleep(5)
    tis = airflow.all_task_instances(DAG, run_id)
    assert {t["state"] for t in tis} == {"deferred"}, collections.Counter(t["state"] for t in tis)
    for triggerer in triggerers:
        airflow.start(triggerer)
    state = _wait_run(airflow, run_id)
    assert airflow.emulator.stats()["faultsInjected"] > 0
    _check_one_job_per_try(airflow, run_id, state)


def test_postgresql_restarted_while_tasks_submit_and_while_they_defer(airflow):
    """PostgreSQL is restarted (fast shutdown: every session cut, 5 s down) twice: while the 50
    tasks are submitting (some jobs created, most not yet) and again while all of them wait
    deferred. The run succeeds, one job per task try (a try the restart ended re-attaches on its
    retry), every job ended."""
    run_id = _trigger(airflow)
    _wait_jobs(airflow, 5)
    airflow.pg.restart(down_seconds=5)  # while tasks submit
    deadline = time.monotonic() + 1200
    while True:
        _revive(airflow)
        with contextlib.suppress(Exception):
            tis = airflow.all_task_instances(DAG, run_id)
            if len(tis) == TASKS and {t["state"] for t in tis} == {"deferred"}:
                break
            assert "failed" not in {t["state"] for t in tis}, airflow.why(DAG, run_id)
        assert time.monotonic() < deadline, f"not all deferred\n{airflow.why(DAG, run_id)}"
        time.sleep(2)
    submitting = len(_jobs(airflow))
    airflow.pg.restart(down_seconds=5)  # while all of them defer
    time.sleep(5)
    _release_gpus(airflow)
    state = _wait_run(airflow, run_id, revive=True)
    jobs = _check_one_job_per_try(airflow, run_id, state)
    assert submitting >= TASKS and len(jobs) >= TASKS


def test_vertex_unreachable_while_jobs_run_then_back(airflow):
    """Vertex (the emulator) refuses every connection for VERTEX_OUTAGE_SECONDS (150 s by
    default, see there) while the 50 jobs run, then comes back with the jobs still running:
    every task carries on (the outage is inside its transient-error window), the run succeeds,
    one job per task try, none cancelled."""
    # each job runs 60 s (real) past the outage's end
    run_id = _trigger(airflow, conf={"run_seconds": int((VERTEX_OUTAGE_SECONDS + 60) * SPEED)})
    airflow.wait_task_instances(DAG, run_id, TASKS, {"deferred"}, timeout=1200)
    _release_gpus(airflow)
    deadline = time.monotonic() + 120
    while {j["state"] for j in _jobs(airflow)} != {"JOB_STATE_RUNNING"}:
        assert time.monotonic() < deadline, collections.Counter(j["state"] for j in _jobs(airflow))
        time.sleep(0.5)
    time.sleep(3)  # the triggers have seen them RUNNING
    airflow.emulator_server.stop()
    try:
        time.sleep(VERTEX_OUTAGE_SECONDS)
        tis = airflow.all_task_instances(DAG, run_id)
        assert {t["state"] for t in tis} == {"deferred"}, collections.Counter(t["state"] for t in tis)
    finally:
        airflow.emulator_server.start()
    assert {j["state"] for j in _jobs(airflow)} == {"JOB_STATE_RUNNING"}  # back, the jobs still run
    state = _wait_run(airflow, run_id)
    _check_one_job_per_try(airflow, run_id, state)
    assert airflow.emulator.stats()["cancels"] == 0


@ON_CELERY
def test_redis_broker_restarted_mid_run(airflow):
    """Celery: the Redis broker is killed and started again empty (no persistence: its queued
    messages are lost) twice: while the 50 tasks are being queued and submit, and again while
    their resumptions are queued after the jobs end. The lost tasks are queued again (the
    scheduler's task_queued_timeout, 90 s here); the run succeeds, one job per task try, every
    job ended."""
    run_id = _trigger(airflow)
    _wait_jobs(airflow, 5)
    airflow.redis.restart(down_seconds=3)  # while tasks are queued and submit
    airflow.wait_task_instances(DAG, run_id, TASKS, {"deferred"}, timeout=1200)
    _release_gpus(airflow)
    deadline = time.monotonic() + 600
    while sum(t["state"] == "success" for t in airflow.all_task_instances(DAG, run_id)) < 5:
        assert time.monotonic() < deadline, airflow.why(DAG, run_id)
        time.sleep(1)
    airflow.redis.restart(down_seconds=3)  # while resumed tasks are queued
    state = _wait_run(airflow, run_id, revive=True)
    _check_one_job_per_try(airflow, run_id, state)


def test_task_log_disk_full_leaves_the_training_alone(airflow):
    """The disk of the DAG's task logs (a 16 MB tmpfs on ``logs/dag_id=e2e_faults``) is filled
    to the last byte while the 50 tasks wait deferred, and stays full while their jobs run: no
    log line of theirs can be written. The training is not affected: every job runs to
    SUCCEEDED and none is duplicated or cancelled while the disk is full. Once it has room again
    the run succeeds, one job per task try.

    Airflow 3.3.2's triggerer exits when a trigger's log line cannot be written (ENOSPC from its
    log file, triggerer_job_runner.py ``_process_log_messages_from_subprocess``): the test starts
    it again each time, as a process supervisor would; the tasks resume once the disk is freed."""
    if not SmallDisk.available():
        pytest.skip("mounting a tmpfs needs root")
    with SmallDisk(airflow.home / "logs" / f"dag_id={DAG}", size="16m") as disk:
        run_id = _trigger(airflow)
        airflow.wait_task_instances(DAG, run_id, TASKS, {"deferred"}, timeout=1200)
        disk.fill()
        _release_gpus(airflow)
        deadline = time.monotonic() + 600
        while {j["state"] for j in _jobs(airflow)} != {"JOB_STATE_SUCCEEDED"}:  # the training, disk full
            assert time.monotonic() < deadline, collections.Counter(j["state"] for j in _jobs(airflow))
            _revive(airflow)
            time.sleep(2)
        jobs = _jobs(airflow)
        assert len(jobs) == TASKS and airflow.emulator.stats()["cancels"] == 0, airflow.emulator.stats()
        disk.free()
        state = _wait_run(airflow, run_id, revive=True)
        jobs = _check_one_job_per_try(airflow, run_id, state)
    assert {j["state"] for j in jobs} == {"JOB_STATE_SUCCEEDED"} and len(jobs) == TASKS
