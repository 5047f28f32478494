"""Run Airflow 3.3 as deployed: scheduler, dag-processor, triggerer and api-server as separate
processes, LocalExecutor, a fresh AIRFLOW_HOME, on a throwaway PostgreSQL cluster.

Usage::

    with PostgresCluster() as pg, AirflowDeployment(home, pg.url, dags, env) as airflow:
        run_id = airflow.trigger("e2e_training")
        assert airflow.wait("e2e_training", run_id, timeout=120) == "success"

Notes (measured on 3.3.2, PostgreSQL 15):
  * Airflow 3 also opens an async engine: ``postgresql+psycopg2`` needs ``asyncpg`` installed
    (the async URL is derived as ``postgresql+asyncpg``); without it ``airflow db migrate`` fails.
  * The pytest process has a SQLite AIRFLOW_HOME in its env (tests/conftest.py); the components
    get an env with every ``AIRFLOW*`` variable removed and the deployment's own set instead.
  * Each component runs in its own session (process group): ``kill``/``stop`` signal the whole
    group plus any descendants that left it (LocalExecutor workers, the triggerer's runner).
  * The CeleryExecutor deployment (Redis, two workers, schedulers and triggerers) is
    ``tests/e2e/celery_deployment.py``: a subclass, through ``components`` and ``_component``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import requests

VENV_BIN = Path(sys.executable).parent
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")


# What this process started and has not stopped: a run stopped half-way (SIGTERM from a timeout,
# Ctrl-C, a teardown that never ran) stops them at its exit instead of leaving schedulers, workers,
# Redis and PostgreSQL clusters running to slow every run after it. tests/interrupt.py turns
# SIGTERM into KeyboardInterrupt so that the exit (and the teardowns before it) happen at all.
_LEFT_RUNNING: dict[int, Callable[[], None]] = {}


def started(owner: object, stop: Callable[[], None]) -> None:
    """``owner`` has something running that ``stop`` ends (fast, no grace): stopped at exit unless
    :func:`stopped` is called first."""
    _LEFT_RUNNING[id(owner)] = stop


def stopped(owner: object) -> None:
    _LEFT_RUNNING.pop(id(owner), None)


@atexit.register
def stop_left_running() -> None:
    """Stop, newest first, what was started and never stopped (atexit: also after an interrupt)."""
    while _LEFT_RUNNING:
        _, stop = _LEFT_RUNNING.popitem()
        try:
            stop()
        except Exception as error:  # the next one still gets stopped
            print(f"stop_left_running: {error!r}", file=sys.stderr)


# Ports handed out, each from a band of its own per pytest-xdist worker (gw0, gw1, ...; a run
# without xdist the first) and below Linux's ephemeral range (32768-60999): a port checked free
# here is bound later by PostgreSQL, Redis or an Airflow component, and in between neither the
# other worker's deployments nor an outgoing connection (which takes an ephemeral port) may take it.
PORT_BAND, PORT_BASE = 2000, 12000
_handed_out: set[int] = set()


def _band() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker[2:].isdigit() else 0
    start = PORT_BASE + (index % 10) * PORT_BAND
    return range(start, start + PORT_BAND)


def free_port() -> int:
    """A loopback port free now and not handed out before by this process, from its worker's band."""
    import random

    band = list(_band())
    span = f"{band[0]}-{band[-1]}"
    random.shuffle(band)  # two runs at once on the machine (two checkouts) rarely pick the same
    for port in band:
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {span}")


def pg_available() -> bool:
    return shutil.which("pg_createcluster") is not None and bool(_pg_versions())


E2E_DAGS = Path(__file__).parent / "dags"


def dags_folder(root: Path, names: tuple[str, ...] | None = None) -> Path:
    """``root/dags`` holding the e2e DAG files (all of them, or ``names``), for a deployment."""
    dags = root / "dags"
    dags.mkdir()
    for path in E2E_DAGS.glob("*.py"):
        if names is None or path.name in names:
            shutil.copy(path, dags / path.name)
    return dags


def _pg_versions() -> list[str]:
    base = Path("/usr/lib/postgresql")
    return sorted((p.name for p in base.iterdir() if (p / "bin" / "postgres").exists()), key=int) if base.exists() else []


class PostgresCluster:
    """A throwaway Debian PostgreSQL cluster (trust auth, loopback, a free port), dropped on exit."""

    def __init__(self, version: str | None = None, port: int | None = None, dbname: str = "airflow"):
        self.version = version or _pg_versions()[-1]
        self.port = port or free_port()
        self.name = f"e2e{uuid.uuid4().hex[:8]}"
        self.dbname = dbname
        self._created = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{self.dbname}"

    def _run(self, *cmd: str) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def create(self) -> None:
        started(self, self.drop)  # before: a half-created cluster is dropped too
        self._run("pg_createcluster", self.version, self.name, "-p", str(self.port), "--",
                  "--auth-local=trust", "--auth-host=trust")
        self._created = True

    def start(self) -> None:
        self._run("pg_ctlcluster", self.version, self.name, "start")

    def createdb(self) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{self.dbname}"')
        finally:
            conn.close()

    def drop(self) -> None:
        stopped(self)
        if self._created:
            subprocess.run(["pg_dropcluster", "--stop", self.version, self.name],
                           capture_output=True, timeout=120)
            self._created = False

    def __enter__(self) -> PostgresCluster:
        try:
            self.create()
            self.start()
            self.createdb()
        except BaseException:
            self.drop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.drop()

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server (fast: every session is cut, as a crash or a failover would), stay
        down ``down_seconds``, start it again on the same port with the same data."""
        self._run("pg_ctlcluster", self.version, self.name, "stop", "-m", "fast")
        time.sleep(down_seconds)
        self._run("pg_ctlcluster", self.version, self.name, "start")


# The schema and rows `airflow db migrate` left in the first deployment's database (a pg_dump
# custom-format file in a directory of this process), restored into every later deployment's.
_MIGRATED: dict[str, Path] = {}


def _pg_args(db_url: str) -> list[str] | None:
    """``pg_dump``/``pg_restore`` connection options of a ``postgresql+psycopg2://user@host:port/db``."""
    from urllib.parse import urlsplit

    url = urlsplit(db_url)
    if not url.scheme.startswith("postgresql") or not url.port or not _pg_versions():
        return None
    return ["-h", url.hostname or "127.0.0.1", "-p", str(url.port), "-U", url.username or "postgres",
            "-d", url.path.lstrip("/")]


def _pg_tool(name: str) -> str:
    return str(Path("/usr/lib/postgresql") / _pg_versions()[-1] / "bin" / name)  # the clusters' version


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def _keep_migrated(db_url: str, log_path: Path) -> None:
    args = _pg_args(db_url)
    key = _airflow_version()
    if args is None or key in _MIGRATED:
        return
    import tempfile

    dump = Path(tempfile.mkdtemp(prefix="e2e-migrated-")) / "airflow.dump"
    with open(log_path, "ab") as log:
        proc = subprocess.run([_pg_tool("pg_dump"), "-Fc", "-f", str(dump), *args], stdout=log,
                              stderr=subprocess.STDOUT, timeout=120)
    if proc.returncode == 0:
        _MIGRATED[key] = dump
        atexit.register(shutil.rmtree, dump.parent, True)


def _restore_migrated(db_url: str, log_path: Path) -> bool:
    """Restore the kept migrated database into ``db_url``'s (empty) one; False: migrate instead."""
    args = _pg_args(db_url)
    dump = _MIGRATED.get(_airflow_version())
    if args is None or dump is None:
        return False
    with open(log_path, "ab") as log:
        log.write(f"restoring the migrated database of {dump} (airflow db migrate ran once)\n".encode())
        log.flush()
        proc = subprocess.run([_pg_tool("pg_restore"), "--no-owner", "--exit-on-error", *args, str(dump)],
                              stdout=log, stderr=subprocess.STDOUT, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"pg_restore of the migrated database failed:\n{log_path.read_text()[-5000:]}")
    return True


def _descendants(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:
        return []


def _signal_tree(pgid: int, pids: list[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie child of ours counts as gone
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                continue
        except OSError:
            continue
        return True
    return False


class AirflowDeployment:
    """The four Airflow components as separate processes on ``db_url``, LocalExecutor."""

    executor = "local"
    commands = COMPONENTS  # what start() may run
    components = COMPONENTS  # what the deployment starts (extra instances are "name#2")

    def __init__(self, home: str | os.PathLike, db_url: str, dags_folder: str | os.PathLike,
                 env: dict[str, str] | None = None, api_port: int | None = None):
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.db_url = db_url
        self.api_port = api_port or free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.log_dir = self.home / "component-logs"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = self._build_env(env or {})
        self.session = requests.Session()

    def _build_env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        (self.home / "plugins").mkdir(parents=True, exist_ok=True)
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.home / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",  # the operators' deferrable default
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES": "airflow.* airflow_gpu_sched.*",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__API_AUTH__JWT_SECRET": "e2e-jwt-secret-" + uuid.uuid4().hex,
            "AIRFLOW__API__SECRET_KEY": "e2e-secret-" + uuid.uuid4().hex,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.api_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            # the scheduler and triggerer serve logs on fixed ports (8793/8794) by default: a
            # second deployment on the machine would collide
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "5",
            # a task whose supervisor died is failed on its missing heartbeat 25-32 s after the
            # death, not 5 minutes: the supervisor heartbeats every 5 s ([workers]
            # min_heartbeat_interval, left as is), so 6 in a row must go missing before a live task
            # is failed; only running tasks are checked (a deferred one does not heartbeat). 15 s
            # (3 missed) failed a live task in fifty_mapped[celery] in a loaded whole-suite run.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
            # A task's supervisor gives the api-server 5 s a request, 3 tries (defaults): on this
            # 2-core machine loaded by other test runs a start request timed out 3 times and the
            # try failed before it ran ("Workload execution failed": httpcore.ReadTimeout)
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "6",
            "PYTHONUNBUFFERED": "1",
        })
        env.update(extra)
        return env

    # -- life cycle -------------------------------------------------------------------------

    def _airflow(self, *args: str) -> list[str]:
        return [str(VENV_BIN / "airflow"), *args]

    def migrate(self) -> None:
        """``airflow db migrate`` once per process (4-23 s), a copy of its result after that: the
        first migrated database is dumped (``pg_dump``), every later deployment's empty one is
        restored from the dump (about 1 s). Only on PostgreSQL, and only for the same Airflow."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if _restore_migrated(self.db_url, self.log_dir / "db-migrate.log"):
            return
        with open(self.log_dir / "db-migrate.log", "ab") as log:
            proc = subprocess.run(self._airflow("db", "migrate"), env=self.env, cwd=self.home,
                                  stdout=log, stderr=subprocess.STDOUT, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(self.log_dir / 'db-migrate.log').read_text()[-5000:]}")
        _keep_migrated(self.db_url, self.log_dir / "db-migrate.log")

    def start(self, component: str) -> None:
        """Start a component; ``"triggerer#2"`` starts a second triggerer (its own log port)."""
        command, _, instance = component.partition("#")
        assert command in self.commands, component
        if component in self.procs and self.procs[component].poll() is None:
            raise RuntimeError(f"{component} is already running")
        args = {"api-server": ("api-server", "-H", "127.0.0.1", "-p", str(self.api_port))}.get(command, (command,))
        env = self.env if not instance else {**self.env, "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}
        args, env, cwd = self._component(component, args, env)
        started(self, self.kill_all)
        log = open(self.log_dir / f"{component}.log", "ab")
        log.write(f"\n===== starting {component} at {time.strftime('%H:%M:%S')} =====\n".encode())
        log.flush()
        self.procs[component] = subprocess.Popen(self._airflow(*args), env=env, cwd=cwd,
                                                 stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _stop(self, component: str, sig: int, grace: float = 20.0) -> None:
        self._stop_many([component], sig, grace)

    def _stop_many(self, components: list[str], sig: int, grace: float = 20.0) -> None:
        """Signal every component's process tree at once, then wait for them together, SIGKILL
        after ``grace``: a deployment's stop took the sum of its components' exits (29 s for the
        four of LocalExecutor, one of them waiting out the grace), not the slowest one's."""
        trees: list[tuple[subprocess.Popen, list[int]]] = []
        for component in components:
            proc = self.procs.get(component)
            if proc is not None:
                pids = [proc.pid, *_descendants(proc.pid)]
                _signal_tree(proc.pid, pids, sig)
                trees.append((proc, pids))
        deadline = time.monotonic() + (grace if sig != signal.SIGKILL else 5)
        while time.monotonic() < deadline:
            for proc, pids in trees:
                proc.poll()
                new = [p for p in _descendants(proc.pid) if p not in pids]
                _signal_tree(proc.pid, new, sig)  # a child started after the signal gets it too
                pids += new
            if not any(_alive(pids) for _, pids in trees):
                break
            time.sleep(0.1)
        else:
            for proc, pids in trees:
                _signal_tree(proc.pid, pids, signal.SIGKILL)
        for proc, _ in trees:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def kill(self, component: str) -> None:
        """SIGKILL the component and its children: a crash, nothing gets to clean up."""
        self._stop(component, signal.SIGKILL)

    def terminate(self, component: str, grace: float = 20.0) -> None:
        """SIGTERM (then SIGKILL after ``grace`` s): a graceful shutdown."""
        self._stop(component, signal.SIGTERM, grace)

    def _component(self, component: str, args: tuple, env: dict[str, str]) -> tuple[tuple, dict[str, str], Path]:
        """(CLI args, env, working directory) of ``component``: a subclass's hook."""
        return args, env, self.home

    def restart(self, component: str) -> None:
        if self.procs.get(component) is not None and self.procs[component].poll() is None:
            self.terminate(component)
        self.start(component)
        if component == "api-server":
            self.wait_api()

    def exited(self) -> list[str]:
        """The components started that are no longer running (crashed, or exited on a fault)."""
        return [c for c, p in self.procs.items() if p.poll() is not None]

    def revive(self) -> list[str]:
        """Start again every component that exited, as a process supervisor (systemd, a
        Kubernetes restart policy) would; returns them."""
        revived = self.exited()
        for component in revived:
            self.start(component)
        return revived

    def stop(self) -> None:
        self._stop_many(list(reversed(self.procs)), signal.SIGTERM)  # every instance, extra triggerers too
        stopped(self)

    def kill_all(self) -> None:
        """SIGKILL every component started, with its children (what an interrupted run leaves)."""
        self._stop_many(list(reversed(self.procs)), signal.SIGKILL)

    def wait_api(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs.get("api-server")
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"api-server exited ({proc.returncode}):\n{self.logs()[-5000:]}")
            try:
                if self.session.get(f"{self.api_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"api-server did not answer within {timeout}s:\n{self.logs()[-5000:]}")

    def __enter__(self) -> AirflowDeployment:
        self.home.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.migrate()
        try:
            for component in self.components:
                self.start(component)
            self.wait_api()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- REST API v2 --------------------------------------------------------------------------

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        # a hang guard: the API server answered a run-state read in over 30 s on a loaded machine
        response = self.session.request(method, f"{self.api_url}/api/v2/{path.lstrip('/')}", timeout=180, **kwargs)
        if response.status_code == 401:
            self._authorize()
            response = self.session.request(method, f"{self.api_url}/api/v2/{path.lstrip('/')}", timeout=180,
                                            **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def _authorize(self) -> None:
        """3.1/3.2 ask a token even of all-admins: the one their simple auth manager hands out."""
        token = self.session.get(f"{self.api_url}/auth/token", timeout=30).json()["access_token"]
        self.session.headers["Authorization"] = f"Bearer {token}"

    def wait_dag(self, dag_id: str, timeout: float = 120.0) -> dict:
        """Wait until the dag-processor has parsed and serialized ``dag_id``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.session.get(f"{self.api_url}/api/v2/dags/{dag_id}", timeout=10)
            if response.status_code == 401:
                self._authorize()
                continue
            if response.status_code == 200:
                return response.json()
            time.sleep(0.5)
        errors = self.session.get(f"{self.api_url}/api/v2/importErrors", timeout=10).text
        raise TimeoutError(f"DAG {dag_id} not parsed within {timeout}s; import errors: {errors}\n{self.logs()[-5000:]}")

    def trigger(self, dag_id: str, conf: dict | None = None, timeout: float = 120.0) -> str:
        self.wait_dag(dag_id, timeout)
        self.api("PATCH", f"dags/{dag_id}", json={"is_paused": False})
        run = self.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait(self, dag_id: str, run_id: str, timeout: float = 180.0) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(0.5)
        return state or "unknown"

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def all_task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        """Every task instance of the run (the REST API serves at most 100 a page)."""
        found: list[dict] = []
        while True:
            page = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                            params={"limit": 100, "offset": len(found)})["task_instances"]
            found += page
            if len(page) < 100:
                return found

    def wait_task_instances(self, dag_id: str, run_id: str, count: int, states: set[str],
                            timeout: float = 600.0) -> list[dict]:
        """Wait until the run has ``count`` task instances, each in one of ``states``; a hang
        guard (not a measure) that also stops at the first failed one."""
        deadline = time.monotonic() + timeout
        while True:
            tis = self.all_task_instances(dag_id, run_id)
            seen = {t["state"] for t in tis}
            if len(tis) == count and seen <= states:
                return tis
            counts: dict[str, int] = {}
            for t in tis:
                counts[str(t["state"])] = counts.get(str(t["state"]), 0) + 1
            if "failed" in seen or time.monotonic() > deadline:
                raise TimeoutError(f"not all {count} in {states}: {counts}\n{self.why(dag_id, run_id)}")
            time.sleep(2)

    def wait_task_state(self, dag_id: str, run_id: str, task_id: str, states: set[str],
                        timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ti in self.task_instances(dag_id, run_id):
                if ti["task_id"] == task_id and ti["state"] in states:
                    return ti["state"]
            time.sleep(0.3)
        raise TimeoutError(f"{task_id} never reached {states}: {self.task_instances(dag_id, run_id)}")

    # -- diagnostics -----------------------------------------------------------------------------

    def why(self, dag_id: str, run_id: str) -> str:
        """What ended a run's task instances badly: each one not successful (state, try, host) and
        the run's audit-log events (state mismatch, heartbeat timeout, ...). The log tail alone is
        mostly the dag-processor's parsing lines."""
        found = []
        offset = 0
        while True:
            page = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                            params={"limit": 100, "offset": offset})["task_instances"]
            found += [(t["task_id"], t["map_index"], t["state"], t["try_number"], t.get("hostname"))
                      for t in page if t["state"] != "success"]
            offset += len(page)
            if len(page) < 100:
                break
        events = self.api("GET", "eventLogs", params={"dag_id": dag_id, "run_id": run_id, "limit": 100})
        notable = [(e.get("when"), e["event"], e.get("task_id"), e.get("map_index"), e.get("try_number"),
                    (e.get("extra") or "")[:400]) for e in events["event_logs"]
                   if e["event"] not in ("running", "success", "deferred", "queued", "scheduled", "trigger")]
        return f"not successful: {found}\nevents: {notable}"

    def task_events(self, dag_id: str, run_id: str) -> str:
        """The ``event`` of every line of a run's task logs (worker tries and triggers), file by
        file: what each try decided, which :meth:`logs`' tail (mostly parsing lines) cuts off."""
        root = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        out = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            out.append(f"== {path.parent.name}/{path.name}")
            for line in path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    out.append(line[:300])
                    continue
                if isinstance(record, dict):
                    out.append(f"{record.get('timestamp', '')} {record.get('level', '')} "
                               f"{str(record.get('event'))[:600]}")
        return "\n".join(out)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            parts.append(f"\n===== {path.name} =====\n{path.read_text(errors='replace')}")
        task_logs = self.home / "logs"
        if task_logs.exists():
            for path in sorted(task_logs.rglob("*.log")):
                parts.append(f"\n===== task log {path.relative_to(task_logs)} =====\n{path.read_text(errors='replace')}")
        return "".join(parts)


class SmallDisk:
    """A tmpfs of ``size`` mounted on ``path`` (root only): a disk that :meth:`fill` makes full,
    so every write to it fails with ENOSPC until :meth:`free`. Unmounted on exit."""

    def __init__(self, path: str | os.PathLike, size: str = "4m"):
        self.path = Path(path)
        self.size = size
        self.filler = self.path / ".filler"

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("mount") is not None

    def __enter__(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0777", "tmpfs", str(self.path)],
                       check=True, capture_output=True, timeout=30)
        return self

    def fill(self) -> None:
        """Write until the disk is full: no byte is left for anyone else."""
        with open(self.filler, "ab", buffering=0) as out:  # unbuffered: close() has nothing left to flush
            try:
                while True:
                    out.write(b"\0" * 4096)
            except OSError:  # ENOSPC: full
                pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def __exit__(self, *exc: Any) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)
