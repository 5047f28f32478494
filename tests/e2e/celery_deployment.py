"""Airflow 3.3 as production teams run it: CeleryExecutor with a Redis broker, PostgreSQL as the
metadata DB and the Celery result backend, two Celery workers, two schedulers (HA), two
triggerers, the api-server and the dag-processor, each a separate process (tests/e2e/harness.py
runs the LocalExecutor deployment; this one reuses its life cycle and REST helpers).

Usage::

    with PostgresCluster() as pg, RedisServer(tmp) as redis, \\
            CeleryDeployment(home, pg.url, dags, env, broker_url=redis.url) as airflow:
        run_id = airflow.trigger("e2e_training")

What stands for separate hosts here:
  * every component has its own process group; each Celery worker also its own working directory
    (``home/hosts/<name>``: its pid file, its cwd) and its own Celery node name;
  * every component reports its own host name to Airflow (``[core] hostname_callable`` reads
    ``E2E_HOSTNAME``): a task instance's ``hostname`` names the worker that ran it, a
    triggerer's job row the triggerer, so a test can tell which "host" did what;
  * the task log folder is shared (as a logs volume is in the Helm chart): a retry's log on one
    worker and its first try's on the other are read from one place.

Settings that decide when a killed worker's task is retried (measured on 3.3.2, celery 5.6):
  * Airflow sends Celery tasks with ``task_acks_late=True``: a SIGKILLed worker's message stays
    unacknowledged in Redis and would be redelivered only after the broker's
    ``visibility_timeout`` (Airflow's default for Redis: 86,400 s). That redelivery is not what
    retries the task: Airflow's own heartbeat detection is. The supervisor heartbeats every 5 s;
    after ``[scheduler] task_instance_heartbeat_timeout`` (30 s here, 300 s by default) without
    one, a scheduler fails the try, and the retry is a new Celery message that a live worker
    takes. A late redelivery of the old message is refused by the execution API (that try is no
    longer queued).
  * A SIGKILLed scheduler's row stops heartbeating; after ``[scheduler]
    scheduler_health_check_threshold`` (10 s here, 30 s by default) the other scheduler counts
    it dead and, every ``orphaned_tasks_check_interval`` (10 s here, 300 s by default), adopts
    the Celery tasks it had queued. Deferred tasks need no scheduler while they wait: their
    triggers run in the triggerers, and any scheduler picks up the resumed task.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.harness import COMPONENTS, AirflowDeployment, _signal_tree, free_port, started, stopped

CELERY_COMPONENTS = (*COMPONENTS, "celery-worker")
HOSTNAME_MODULE = '''"""[core] hostname_callable of the e2e Celery deployment: each component's own host name."""
import os
import socket


def get() -> str:
    return os.environ.get("E2E_HOSTNAME") or socket.getfqdn()
'''


def redis_available() -> bool:
    return shutil.which("redis-server") is not None


class RedisServer:
    """A throwaway redis-server on a free loopback port, in its own directory, no persistence."""

    def __init__(self, directory: str | os.PathLike, port: int | None = None):
        self.dir = Path(directory).resolve()
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def __enter__(self) -> RedisServer:
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "redis.log", "ab")
        # no RDB snapshots, no AOF: a broker that loses its queue on a crash, as the test wants
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"],
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        started(self, self._kill)
        deadline = time.monotonic() + 30
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"redis-server did not start:\n{(self.dir / 'redis.log').read_text()[-3000:]}")
            time.sleep(0.1)
        return self

    def restart(self, down_seconds: float = 0.0) -> None:
        """SIGKILL the server (no persistence: its queues are lost, as in a broker crash), stay
        down ``down_seconds``, start it again on the same port."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_tree(self.proc.pid, [self.proc.pid], 9)
            self.proc.wait(timeout=10)
        self.proc = None
        time.sleep(down_seconds)
        self.__enter__()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _signal_tree(self.proc.pid, [self.proc.pid], 9)
            self.proc.wait(timeout=10)

    def __exit__(self, *exc: Any) -> None:
        stopped(self)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_tree(self.proc.pid, [self.proc.pid], 9)
                self.proc.wait(timeout=5)
        self.proc = None


class CeleryDeployment(AirflowDeployment):
    """CeleryExecutor: two workers, two schedulers, two triggerers, api-server, dag-processor."""

    executor = "celery"
    commands = CELERY_COMPONENTS
    components = ("api-server", "dag-processor", "scheduler", "scheduler#2", "triggerer", "triggerer#2",
                  "celery-worker", "celery-worker#2")

    def __init__(self, home: str | os.PathLike, db_url: str, dags_folder: str | os.PathLike,
                 env: dict[str, str] | None = None, api_port: int | None = None, *, broker_url: str,
                 worker_concurrency: int = 4):
        result_backend = "db+" + db_url  # Celery's SQLAlchemy result backend, same driver (psycopg2)
        celery_env = {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(worker_concurrency),
            # the scheduler's pool of processes that send Celery messages: one is plenty here
            "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "e2e_hostname.get",
            # HA schedulers: a dead one is noticed after 10 s and its queued tasks adopted within 10 s
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
        }
        self.hosts_dir = Path(home).resolve() / "hosts"
        super().__init__(home, db_url, dags_folder, {**celery_env, **(env or {})}, api_port)
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        (self.hosts_dir / "e2e_hostname.py").write_text(HOSTNAME_MODULE)
        path = [str(self.hosts_dir), *filter(None, self.env.get("PYTHONPATH", "").split(os.pathsep))]
        self.env["PYTHONPATH"] = os.pathsep.join(path)

    @staticmethod
    def hostname(component: str) -> str:
        """The host name ``component`` reports to Airflow: ``celery-worker#2`` -> ``e2e-celery-worker-2``."""
        command, _, instance = component.partition("#")
        return f"e2e-{command}-{instance or '1'}"

    def component_of_hostname(self, hostname: str | None) -> str | None:
        return next((c for c in self.procs if self.hostname(c) == hostname), None)

    def _component(self, component: str, args: tuple, env: dict[str, str]) -> tuple[tuple, dict[str, str], Path]:
        command, _, _ = component.partition("#")
        host = self.hostname(component)
        env = {**env, "E2E_HOSTNAME": host}
        cwd = self.hosts_dir / host
        cwd.mkdir(parents=True, exist_ok=True)
        if command == "celery-worker":
            # its own log-server port and pid file: two workers on one machine must not collide
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
            concurrency = env["AIRFLOW__CELERY__WORKER_CONCURRENCY"]
            args = ("celery", "worker", "--celery-hostname", f"{host}@%h", "--concurrency", concurrency,
                    "--pid", str(cwd / "worker.pid"), "--without-mingle", "--without-gossip")
        return args, env, cwd

    def workers(self) -> list[str]:
        return [c for c in self.procs if c.startswith("celery-worker") and self.procs[c].poll() is None]
