"""The reaper as deployed (docs/reaper.md): jobs that no ``on_kill`` cancels are cancelled by the
triggerer's shared poller, and a job a live try owns never is.

The deployment runs the reaper every 2 s with a 2 s grace (``[gpu_sched] reaper_interval`` and
``reaper_grace`` through the env), so "two sightings a grace apart" is the second pass that sees
the job orphaned. Each test keeps one task of the same DAG deferred (a "keeper": its job waits
for GPUs for ever), because the reaper runs in the shared poller of a triggerer that watches a
job in the region; the keeper's job must never be cancelled either. Assertions are made against
the emulator's own records and the triggerers' logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from datetime import datetime

import psutil
import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.orchestration.orphans import label_value
from tests.e2e.celery_deployment import CeleryDeployment, RedisServer, redis_available
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
HOLD, RETRY, SYNC = "e2e_reaper_hold", "e2e_reaper_retry", "e2e_reaper_sync"
EXECUTORS = [pytest.param("local", id="local"), pytest.param("celery", id="celery", marks=pytest.mark.celery)]
CANCELLED = ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
PASS_LINE = re.compile(r"reaper pass (\d+) \(custom_job\): (\d+) active jobs, (\d+) examined, (\d+) orphaned, (\d+) due")


@pytest.fixture(scope="module", params=EXECUTORS)
def deployment(request, tmp_path_factory):
    executor = request.param
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    if executor == "celery" and not redis_available():
        pytest.skip("redis-server missing (the Celery broker): apt-get install -y redis-server")
    root = tmp_path_factory.mktemp(f"e2e-reaper-{executor}")
    dags = dags_folder(root, ("e2e_reaper.py", "_e2e_task.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg, contextlib.ExitStack() as stack:
        conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": "e2e-project", "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn),
               "AIRFLOW__GPU_SCHED__REAPER_INTERVAL": "2", "AIRFLOW__GPU_SCHED__REAPER_GRACE": "2"}
        if executor == "celery":
            redis = stack.enter_context(RedisServer(root / "redis"))
            deployed = CeleryDeployment(root / "home", pg.url, dags, env, broker_url=redis.url)
        else:
            deployed = AirflowDeployment(root / "home", pg.url, dags, env)
        with deployed as airflow:
            airflow.emulator = EmulatorControl(emulator.url)
            # once per module, never between tests: a reset starts the job ids again, and a late
            # on_kill of the last test's trigger would then cancel this test's job of the same name
            airflow.emulator.reset({**FAST, "queueSeconds": 100_000})  # every job waits for GPUs for ever
            yield airflow


@pytest.fixture
def airflow(deployment):
    yield deployment
    # leave nothing waiting for the next test: fail the runs (a deferred task's on_kill cancels its
    # job), then cancel what no trigger held (a victim's job, if the test failed before the reaper)
    def unfinished() -> list[tuple[str, str, str | None]]:
        return [(dag_id, run["dag_run_id"], t["state"]) for dag_id in (HOLD, RETRY, SYNC)
                for run in deployment.api("GET", f"dags/{dag_id}/dagRuns", params={"state": "running"})["dag_runs"]
                for t in deployment.task_instances(dag_id, run["dag_run_id"])
                if t["state"] not in ("failed", "success", "skipped", "upstream_failed")]

    for dag_id, run_id, _ in unfinished():  # a deferred task marked failed: its trigger's on_kill cancels
        with contextlib.suppress(RuntimeError):  # it may have ended meanwhile
            deployment.api("PATCH", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    deadline = time.monotonic() + 180
    while left := unfinished():
        assert time.monotonic() < deadline, left
        time.sleep(0.5)
    emulator = deployment.emulator
    active = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")
    for job in _jobs(deployment):  # an on_kill may be cancelling it too: a second cancel is harmless
        if job["state"] in active:
            response = emulator._session.post(f"{emulator.url}/v1/{job['name']}:cancel", json={}, timeout=10)
            assert response.status_code in (200, 400), (job["name"], response.status_code, response.text)
    deadline = time.monotonic() + 180
    while left := [(j["name"], j["state"]) for j in _jobs(deployment) if j["state"] in active]:
        assert time.monotonic() < deadline, left  # none left for the next test's passes
        time.sleep(0.5)


def _jobs(airflow: AirflowDeployment) -> list[dict]:
    emulator = airflow.emulator
    response = emulator._session.get(f"{emulator.url}/v1/projects/e2e-project/locations/us-central1/customJobs",
                                     timeout=10)
    response.raise_for_status()
    return response.json().get("customJobs", [])


def _job(airflow: AirflowDeployment, name: str) -> dict:
    return {j["name"]: j for j in _jobs(airflow)}[name]


def _triggerer_logs(airflow: AirflowDeployment) -> str:
    """What the triggerers logged: their own output and the trigger logs. The reaper's lines are in
    the trigger log of the task whose trigger started the region's poller (the poller's asyncio
    task inherits that trigger's log context)."""
    paths = [*sorted(airflow.log_dir.glob("triggerer*.log")), *sorted((airflow.home / "logs").rglob("*.log.trigger.*"))]
    return "".join(p.read_text(errors="replace") for p in paths)


def _passes(airflow: AirflowDeployment) -> list[tuple[int, ...]]:
    return [tuple(int(g) for g in m.groups()) for m in PASS_LINE.finditer(_triggerer_logs(airflow))]


def _keeper(airflow: AirflowDeployment, dag_id: str) -> tuple[str, str]:
    """A run of ``dag_id`` that defers on a job waiting for GPUs: (run id, job name)."""
    run_id = airflow.trigger(dag_id)
    airflow.wait_task_state(dag_id, run_id, "train", {"deferred"}, timeout=180)
    [job] = [j for j in _jobs(airflow) if j["labels"].get("airflow-run") == label_value(run_id)]
    return run_id, job["name"]


def _stalled_victim(airflow: AirflowDeployment, dag_id: str) -> tuple[str, str]:
    """A run whose try 1 created its job and was SIGKILLed before deferring: (run id, job name),
    once the task instance is waiting for its retry."""
    run_id = airflow.trigger(dag_id, conf={"stall": True})
    marker = airflow.home / "e2e-markers" / f"{run_id}.pid"
    deadline = time.monotonic() + 180
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, f"try 1 never submitted\n{airflow.why(dag_id, run_id)}"
        time.sleep(0.2)
    pid_text, job_name = marker.read_text().split()
    os.kill(int(pid_text), signal.SIGKILL)  # a worker host lost: nothing runs the operator's on_kill
    return run_id, job_name


def _wait_cancelled(airflow: AirflowDeployment, job_name: str, dag_id: str, run_id: str) -> None:
    deadline = time.monotonic() + 240  # a hang guard, not a measure
    while _job(airflow, job_name)["state"] not in CANCELLED:
        assert time.monotonic() < deadline, \
            f"job not cancelled\n{_passes(airflow)[-10:]}\n{_triggerer_logs(airflow)[-20000:]}"
        time.sleep(0.5)


def _wait_passes(airflow: AirflowDeployment, after: int, count: int, **expect: int) -> int:
    """Wait until ``count`` reaper passes numbered above ``after`` logged the ``expect``ed counts
    (active, examined, orphaned, due); the last pass number. A hang guard only."""
    fields = ("active", "examined", "orphaned", "due")
    deadline = time.monotonic() + 240
    while True:
        seen = [p for p in _passes(airflow) if p[0] > after]
        matching = [p for p in seen if all(p[1 + fields.index(k)] == v for k, v in expect.items())]
        assert all(p in matching for p in seen), (seen, expect)
        if len(matching) >= count:
            return matching[-1][0]
        assert time.monotonic() < deadline, f"no reaper pass: {seen}\n{_triggerer_logs(airflow)[-20000:]}"
        time.sleep(0.5)


def _first_pass(airflow: AirflowDeployment, after: int, **expect: int) -> int:
    """The number of the first reaper pass above ``after`` that logged the ``expect``ed counts
    (active, examined, orphaned, due). A hang guard only."""
    fields = ("active", "examined", "orphaned", "due")
    deadline = time.monotonic() + 240
    while not (found := [p[0] for p in _passes(airflow) if p[0] > after
                         and all(p[1 + fields.index(k)] == v for k, v in expect.items())]):
        assert time.monotonic() < deadline, f"no reaper pass with {expect}: {_passes(airflow)[-10:]}"
        time.sleep(0.5)
    return min(found)


def _last_pass(airflow: AirflowDeployment) -> int:
    return max((p[0] for p in _passes(airflow)), default=0)


def _check_created(airflow: AirflowDeployment, start: dict, created: int) -> None:
    """Since ``start`` (the emulator's stats): this many FLEX_START jobs created. (Cancels are
    checked per job: the last test's teardown may still be cancelling its own.)"""
    now = airflow.emulator.stats()
    assert now["jobsCreated"].get("FLEX_START", 0) - start["jobsCreated"].get("FLEX_START", 0) == created, (start, now)


def _reaped(airflow: AirflowDeployment, job_name: str) -> str:
    """The reaper's one line about cancelling ``job_name`` (the log reaches its file after the
    cancel reached the emulator: wait for it, a hang guard only)."""
    deadline = time.monotonic() + 120
    while not (lines := [line for line in _triggerer_logs(airflow).splitlines()
                         if f"reaper: cancelled {job_name}" in line]):
        assert time.monotonic() < deadline, f"no reaper line for {job_name}\n{_triggerer_logs(airflow)[-20000:]}"
        time.sleep(0.5)
    [line] = lines
    return line


def test_a_task_marked_failed_while_waiting_for_its_retry_has_its_job_cancelled_within_two_passes(airflow):
    """Try 1 created its job and died before deferring (no trigger, so no on_kill); while the task
    waits for its retry a user marks it failed: the reaper cancels the job on the second pass that
    sees it orphaned, logs why, and leaves the deferred keeper's job alone. Fails on main: nothing
    cancels the job (it stays QUEUED until the hang guard)."""
    start = airflow.emulator.stats()
    _, keeper_job = _keeper(airflow, HOLD)
    run_id, job_name = _stalled_victim(airflow, HOLD)
    airflow.wait_task_state(HOLD, run_id, "train", {"up_for_retry"}, timeout=180)
    assert _job(airflow, job_name)["state"] == "JOB_STATE_QUEUED"
    before = _last_pass(airflow)
    airflow.api("PATCH", f"dags/{HOLD}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _wait_cancelled(airflow, job_name, HOLD, run_id)
    # the passes since the mark: one first sighting, then the cancel (maybe one pass before the
    # mark landed, which saw it owned)
    orphaned = [p for p in _passes(airflow) if p[0] > before and p[3] >= 1]
    assert [p[4] for p in orphaned][:2] == [0, 1], orphaned
    line = _reaped(airflow, job_name)
    assert f"dag={HOLD} task=train run={label_value(run_id)} try=1" in line, line
    assert "task instance is failed" in line, line
    assert "EMULATOR_RUN_SECONDS" not in _triggerer_logs(airflow)
    assert _job(airflow, keeper_job)["state"] == "JOB_STATE_QUEUED"
    _check_created(airflow, start, created=2)


def test_a_deferred_task_marked_failed_has_its_job_cancelled_by_on_kill_or_else_the_reaper(airflow):
    """A deferred task marked failed (docs/compatibility.md): on an Airflow whose triggers get
    ``on_kill`` (3.3) the trigger cancels the job; on 3.1/3.2 nothing calls it, and the reaper
    cancels the job on the second pass that sees it orphaned (the keeper's trigger keeps the
    region's poller, where the reaper runs), logging why. The keeper's job is left alone."""
    from airflow_gpu_sched import compat

    start = airflow.emulator.stats()
    _, keeper_job = _keeper(airflow, HOLD)
    run_id, job_name = _keeper(airflow, HOLD)  # the victim: deferred on its job too
    before = _last_pass(airflow)
    airflow.api("PATCH", f"dags/{HOLD}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _wait_cancelled(airflow, job_name, HOLD, run_id)
    if not compat.TRIGGERS_GET_ON_KILL:  # the reaper's cancel, after a first sighting
        line = _reaped(airflow, job_name)
        assert f"dag={HOLD} task=train run={label_value(run_id)}" in line and "task instance is failed" in line, line
        orphaned = [p for p in _passes(airflow) if p[0] > before and p[3] >= 1]
        assert [p[4] for p in orphaned][:2] == [0, 1], orphaned
    assert _job(airflow, keeper_job)["state"] == "JOB_STATE_QUEUED"
    _check_created(airflow, start, created=2)


def test_a_dag_run_deleted_while_its_task_waits_has_its_job_cancelled(airflow):
    """The DAG run is deleted while its task waits for its retry (its task instances vanish with
    it, no on_kill): the reaper cancels the job, saying no task instance owns it. Fails on main."""
    start = airflow.emulator.stats()
    _, keeper_job = _keeper(airflow, HOLD)
    run_id, job_name = _stalled_victim(airflow, HOLD)
    airflow.wait_task_state(HOLD, run_id, "train", {"up_for_retry"}, timeout=180)
    # Airflow's REST API refuses to delete a running run (409); its rows vanish so under
    # `airflow db clean` or a database admin's DELETE, which cascades to its task instances
    from sqlalchemy import create_engine, text

    engine = create_engine(airflow.db_url)
    try:
        with engine.begin() as db:
            deleted = db.execute(text("DELETE FROM dag_run WHERE dag_id = :dag AND run_id = :run"),
                                 {"dag": HOLD, "run": run_id}).rowcount
    finally:
        engine.dispose()
    assert deleted == 1
    assert all(r["dag_run_id"] != run_id for r in airflow.api("GET", f"dags/{HOLD}/dagRuns")["dag_runs"])
    _wait_cancelled(airflow, job_name, HOLD, run_id)
    line = _reaped(airflow, job_name)
    assert f"run={label_value(run_id)}" in line and "no task instance of it in the metadata DB" in line, line
    assert _job(airflow, keeper_job)["state"] == "JOB_STATE_QUEUED"
    _check_created(airflow, start, created=2)


def test_a_retry_re_attaching_while_the_reaper_passes_is_left_alone(airflow):
    """The race: try 1 dies between create and defer; while its task waits for its retry (10 s)
    and the retry re-attaches, reaper passes (every 2 s, grace 2 s) look at the job: every one
    finds it owned. No cancel, one job for the run, the retry deferred on it. Fails on main: no
    reaper pass is ever logged (and a reaper that took only running/deferred as alive, or did not
    re-read before cancelling, would cancel here)."""
    start = airflow.emulator.stats()
    _, keeper_job = _keeper(airflow, RETRY)
    after = _last_pass(airflow)
    run_id, job_name = _stalled_victim(airflow, RETRY)
    # every pass from now on finds nothing orphaned (checked on each wait below); two of them
    # before the retry's re-attach is awaited (the task waiting for its retry, or already back)
    last = _wait_passes(airflow, after, 2, orphaned=0, due=0)
    root = airflow.home / "logs" / f"dag_id={RETRY}" / f"run_id={run_id}"
    deadline = time.monotonic() + 240
    while not any(f"re-attaching to {job_name}" in p.read_text(errors="replace")
                  for p in root.rglob("attempt=2*") if p.is_file()):
        assert time.monotonic() < deadline, f"try 2 never re-attached\n{airflow.why(RETRY, run_id)}"
        time.sleep(0.5)
    assert airflow.wait_task_state(RETRY, run_id, "train", {"deferred"}, timeout=180) == "deferred"
    _wait_passes(airflow, after, 0, orphaned=0, due=0)
    # and after: still owned. Counted from the first pass whose list held the victim's job: a
    # pass numbered after `last` may have listed before the create (its line reaches the log
    # file later), and saw the keeper's job alone; every pass after one that saw both does too
    both = _first_pass(airflow, last, active=2)
    settled = max(both, _last_pass(airflow))
    _wait_passes(airflow, settled, 2, active=2, examined=2, orphaned=0, due=0)
    ours = [j for j in _jobs(airflow) if j["labels"].get("airflow-run") == label_value(run_id)]
    assert [(j["name"], j["state"]) for j in ours] == [(job_name, "JOB_STATE_QUEUED")], ours
    assert _job(airflow, keeper_job)["state"] == "JOB_STATE_QUEUED"
    _check_created(airflow, start, created=2)
    assert f"reaper: cancelled {job_name}" not in _triggerer_logs(airflow)
    ti = {t["task_id"]: t for t in airflow.task_instances(RETRY, run_id)}["train"]
    assert ti["try_number"] == 2, ti


def _task_process(airflow: AirflowDeployment, ti_id: str) -> psutil.Process:
    """The task process of a try: the task runner titles it ``airflow worker -- <ti id>``."""
    title = f"airflow worker -- {ti_id}"
    deadline = time.monotonic() + 60
    while True:
        for proc in psutil.process_iter(["cmdline"]):
            if " ".join(filter(None, proc.info["cmdline"] or ())) == title:  # padded with empty args
                return proc
        assert time.monotonic() < deadline, f"no process titled {title!r}"
        time.sleep(0.3)


def _lose_the_worker_host(airflow: AirflowDeployment, ti: dict) -> str | None:
    """SIGKILL what runs the try, as a host lost would (nothing runs ``on_kill``, nothing reports
    the death): on Celery the worker with its pool and task processes (the worker to start again,
    returned); on LocalExecutor the supervisor and the task's process group, as scenario 3b of
    test_deployed.py does."""
    task = _task_process(airflow, ti["id"])
    if airflow.executor == "celery":
        worker = airflow.component_of_hostname(ti["hostname"])
        assert worker in airflow.workers(), ti
        under = psutil.Process(airflow.procs[worker].pid).children(recursive=True)
        assert task.pid in [c.pid for c in under], (worker, task)  # the try runs on that host
        airflow.kill(worker)
        return worker
    supervisor = task.parent()
    assert "LocalExecutor" in " ".join(supervisor.cmdline()), supervisor.cmdline()
    assert supervisor.ppid() == airflow.procs["scheduler"].pid, (supervisor, supervisor.cmdline())
    supervisor.kill()  # first, so it cannot report its child's death
    os.killpg(task.pid, signal.SIGKILL)
    psutil.wait_procs([supervisor, task], timeout=5)
    return None


def test_a_worker_host_lost_during_a_sync_task_has_its_job_cancelled_after_the_task_failed(airflow):
    """A sync-mode task (``deferrable=False``, no retry left) polls its job in the worker while
    the job waits for GPUs; its worker host is lost (SIGKILL, see _lose_the_worker_host): nothing
    runs ``on_kill``, the scheduler fails the try on its missing heartbeat, and the reaper cancels
    the job on the second pass that sees it orphaned, never before the task instance was failed:
    one job, one cancel (at the wire), logged with its task instance. Fails with the reaper off
    (``[gpu_sched] reaper_interval`` 0): the job stays QUEUED until the hang guard."""
    start = airflow.emulator.stats()
    _, keeper_job = _keeper(airflow, HOLD)
    airflow.emulator.start_traffic()  # the cancels sent, and when
    try:
        run_id = airflow.trigger(SYNC)
        airflow.wait_task_state(SYNC, run_id, "train", {"running"}, timeout=180)
        deadline = time.monotonic() + 180
        while not (ours := [j for j in _jobs(airflow) if j["labels"].get("airflow-run") == label_value(run_id)]):
            assert time.monotonic() < deadline, f"try 1 never submitted\n{airflow.why(SYNC, run_id)}"
            time.sleep(0.3)
        [job] = ours
        job_name = job["name"]
        assert job["state"] == "JOB_STATE_QUEUED", job
        ti = {t["task_id"]: t for t in airflow.task_instances(SYNC, run_id)}["train"]
        assert ti["state"] == "running" and ti["try_number"] == 1, ti  # polling in the worker, not deferred
        before = _last_pass(airflow)
        worker = _lose_the_worker_host(airflow, ti)
        try:
            deadline = time.monotonic() + 240  # a hang guard: the 30 s heartbeat timeout, late on a loaded machine
            while (ti := {t["task_id"]: t for t in airflow.task_instances(SYNC, run_id)}["train"])["state"] != "failed":
                assert ti["state"] == "running", ti  # nobody else ends it
                assert time.monotonic() < deadline, f"no heartbeat timeout: {ti}\n{airflow.why(SYNC, run_id)}"
                time.sleep(0.5)
            _wait_cancelled(airflow, job_name, SYNC, run_id)
            line = _reaped(airflow, job_name)
        finally:
            if worker:
                airflow.start(worker)
        exchanges = airflow.emulator.traffic()
    finally:
        airflow.emulator._call("POST", "traffic:stop", {})
    events = airflow.api("GET", "eventLogs", params={"dag_id": SYNC, "run_id": run_id,
                                                     "event": "heartbeat timeout"})["event_logs"]
    assert [(e["task_id"], e["try_number"]) for e in events] == [("train", 1)], events
    ti = {t["task_id"]: t for t in airflow.task_instances(SYNC, run_id)}["train"]
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    # one cancel of the job at the wire, after the task instance was failed
    cancels = [e for e in exchanges if e["method"] == "POST" and e["path"] == f"{job_name}:cancel"]
    assert [e["status"] for e in cancels] == [200], cancels
    failed_at = datetime.fromisoformat(ti["end_date"].replace("Z", "+00:00")).timestamp()
    assert cancels[0]["at"] > failed_at, (cancels[0]["at"], ti["end_date"])
    # within two passes after the failure: the first that sees it orphaned, then the cancel
    orphaned = [p for p in _passes(airflow) if p[0] > before and p[3] >= 1]
    assert [p[4] for p in orphaned][:2] == [0, 1], orphaned
    assert f"dag={SYNC} task=train run={label_value(run_id)} try=1" in line, line
    assert "task instance is failed" in line, line
    assert "EMULATOR_RUN_SECONDS" not in _triggerer_logs(airflow)
    ours = [j for j in _jobs(airflow) if j["labels"].get("airflow-run") == label_value(run_id)]
    assert [j["name"] for j in ours] == [job_name] and ours[0]["state"] in CANCELLED, ours
    assert _job(airflow, keeper_job)["state"] == "JOB_STATE_QUEUED"
    _check_created(airflow, start, created=2)
