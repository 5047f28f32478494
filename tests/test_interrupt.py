"""A pytest run stopped by SIGTERM (a CI timeout) leaves nothing running (issue 38).

A child pytest starts the e2e harness's processes (tests/e2e/harness.py, its own process handling;
each "component" a sleeping Python with a child that left its process group, as LocalExecutor's
workers do), then waits; the test SIGTERMs that pytest and checks that every process it started
is gone and the run reported itself interrupted. Two ways: a ``with`` block whose exit stops the
deployment (the teardown has to run at all), and components started with no teardown at all
(what the harness stops at exit), plus a PostgreSQL cluster where one can be created.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import _pg_versions, pg_available

ROOT = Path(__file__).resolve().parent.parent

CHILD = '''
import json, os, sys, time
from pathlib import Path

from tests.e2e.harness import AirflowDeployment, PostgresCluster

OUT = Path(os.environ["INTERRUPT_OUT"])
# a component: starts a child in a session of its own (out of the group), writes its pid, sleeps
SLEEPER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(sys.argv[1], "a").write(f"{child.pid}\\\\n")
time.sleep(600)
"""


class Sleepers(AirflowDeployment):
    def _airflow(self, *args):
        return [sys.executable, "-c", SLEEPER, str(OUT / "grandchildren")]

    def migrate(self):
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def wait_api(self, timeout=0):
        pass


def ready(deployment, clusters):
    deadline = time.monotonic() + 60
    while len((OUT / "grandchildren").read_text().split()) < len(deployment.procs):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = [p.pid for p in deployment.procs.values()] + [int(p) for p in (OUT / "grandchildren").read_text().split()]
    (OUT / "started.json").write_text(json.dumps({"pids": pids, "clusters": clusters}))
    time.sleep(600)  # the SIGTERM comes here


def test_stopped_while_running(tmp_path):
    (OUT / "grandchildren").write_text("")
    deployment = Sleepers(tmp_path / "home", "postgresql://unused", tmp_path / "dags")
    deployment.migrate()
    if os.environ["INTERRUPT_MODE"] == "with":
        with deployment:
            ready(deployment, [])
    clusters = []
    if os.environ.get("INTERRUPT_PG"):
        pg = PostgresCluster()
        pg.create()
        pg.start()
        clusters.append(pg.name)
    for component in deployment.components:  # no with, no fixture: nothing would stop them
        deployment.start(component)
    ready(deployment, clusters)
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def pg_version() -> str:
    return _pg_versions()[-1]


def _clusters() -> str:
    return subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize("mode", ["with", "no-teardown"])
def test_a_sigterm_run_stops_every_process_it_started(tmp_path, mode):
    child = tmp_path / "test_child.py"
    child.write_text(CHILD)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(ROOT), INTERRUPT_OUT=str(out), INTERRUPT_MODE=mode,
               INTERRUPT_PG="1" if mode == "no-teardown" and pg_available() and os.geteuid() == 0 else "")
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "tests.interrupt", "-p", "no:cacheprovider",
                            "--rootdir", str(tmp_path), "-o", "timeout=0", str(child)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120  # a hang guard: the child starts its processes in ~1 s
        while not (out / "started.json").exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0]
            time.sleep(0.05)
        started = json.loads((out / "started.json").read_text())
        assert started["pids"] and all(_alive(pid) for pid in started["pids"])
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            run.kill()
    left = [pid for pid in started["pids"] if _alive(pid)]
    clusters = [name for name in started["clusters"] if name in _clusters()]
    for pid in left:  # what a failure here would leave: stopped before it is reported
        os.kill(pid, signal.SIGKILL)
    for name in clusters:
        subprocess.run(["pg_dropcluster", "--stop", pg_version(), name], capture_output=True, timeout=120)
    assert (left, clusters) == ([], []), output
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output
