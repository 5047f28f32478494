"""Stop means stop (issue 37): a try told to stop creates no job and moves no plan, and the
CANCELLED its own kill caused is never read as the service's expiry.

The measured bug: ``timeout 60 airflow dags test`` of ``plan=[FLEX_START in us-central1 (no GPUs
there), SPOT in us-east4]``: the SIGTERM's on_kill cancelled the FLEX_START job, the trigger read
that CANCELLED as "FLEX_START capacity never came", and the plan submitted a SPOT job in us-east4
that ran with nobody watching. Here the same thing at the wire: a real ``airflow dags test``
process, killed with SIGTERM while its FLEX_START job waits, the trigger inline (deferrable) or
the worker polling (``deferrable=False``); the emulator's own records say what was created.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import LOCATION, PROJECT, every_custom_job

REPO = Path(__file__).resolve().parent.parent
EAST = "us-east4"
WAITING = {"JOB_STATE_QUEUED", "JOB_STATE_PENDING"}

DAG_FILE = '''
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG

from airflow_gpu_sched.operators import GpuTrainingOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    GpuTrainingOperator(
        task_id="train", project_id="{project}", location="{location}", image_uri="gcr.io/p/trainer:1",
        machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
        base_output_dir="gs://bucket/stop", poll_interval=0.05, deferrable={deferrable},
        plan={plan!r}, execution_timeout={execution_timeout},
    )
'''


def _plan(race: bool) -> list:
    flex = {"strategy": "FLEX_START", "max_wait_duration": "23h"}
    if race:  # the race's members both wait (no GPUs for either), the step after it has capacity
        return [{"race": [flex, {"strategy": "FLEX_START", "max_wait_duration": "23h", "locations": [EAST]}]},
                {"strategy": "SPOT", "locations": [EAST]}]
    return [flex, {"strategy": "SPOT", "locations": [EAST]}]


def _until(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout  # a hang guard, not a timing threshold
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _polls(emulator) -> int:
    counts = emulator.stats()["requests"]
    return sum(n for name, n in counts.items() if name.startswith("customJobs.") and name.split(".")[1]
               in ("get", "list"))


def _waiting_jobs(emulator) -> list[dict]:
    return [j for loc in (LOCATION, EAST) for j in every_custom_job(emulator, loc) if j["state"] in WAITING]


@pytest.mark.parametrize("deferrable,race", [(True, False), (False, False), (True, True)],
                         ids=["trigger-inline", "deferrable-false", "race-inline"])
def test_airflow_dags_test_killed_while_flex_start_waits_creates_nothing_more(airflow_db, fast_emulator, tmp_path,
                                                                             deferrable, race):
    emulator = fast_emulator
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)  # no GPUs for FLEX_START here
    if race:
        emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", flex_start=0)  # nor there; SPOT in us-east4 has them
    dag_id = f"stop_{'race' if race else 'deferrable' if deferrable else 'sync'}"
    (tmp_path / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, project=PROJECT, location=LOCATION,
                                                           deferrable=deferrable, plan=_plan(race),
                                                           execution_timeout=None))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path), "PYTHONPATH": str(REPO),
           "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "dags_test.log"
    with out.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env,
                                   stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            members = 2 if race else 1
            _until(lambda: len(_waiting_jobs(emulator)) == members or process.poll() is not None,
                   "the FLEX_START job(s) never came")
            assert process.poll() is None, out.read_text()
            polled = _polls(emulator)
            _until(lambda: _polls(emulator) >= polled + 3 or process.poll() is not None, "nobody polls the job")
            process.send_signal(signal.SIGTERM)  # what `timeout 60 airflow dags test` sends
            process.wait(timeout=120)  # a hang guard
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    log = out.read_text()
    stats = emulator.stats()
    assert stats["jobsCreated"] == {"FLEX_START": members}, (stats["jobsCreated"], log[-3000:])  # no SPOT job
    assert every_custom_job(emulator, EAST) == [] if not race else all(
        j["jobSpec"]["scheduling"]["strategy"] == "FLEX_START" for j in every_custom_job(emulator, EAST))
    flex = [j for loc in (LOCATION, EAST) for j in every_custom_job(emulator, loc)]
    for job in flex:  # each cancelled by the kill
        state = requests.get(f"{emulator.url}/v1/{job['name']}", timeout=5).json()["state"]
        assert state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"), state
    assert "task killed: cancelling" in log, log[-3000:]
    assert "capacity never came" not in log and "falling back to" not in log, log[-3000:]
    assert "the task was told to stop" in log, log[-3000:]  # the try ended on the stop, not on a verdict


def test_a_sync_try_past_its_execution_timeout_cancels_its_job_and_creates_no_other(airflow_db, fast_emulator,
                                                                                    tmp_path):
    """``execution_timeout`` with ``deferrable=False``: Airflow's SIGALRM raises AirflowTaskTimeout in
    the worker's poll loop and calls ``on_kill``: the FLEX_START job is cancelled and the plan does not
    go on to SPOT (the try failed on its timeout, not on the service's verdict)."""
    emulator = fast_emulator
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    dag_id = "stop_execution_timeout"
    (tmp_path / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, project=PROJECT, location=LOCATION,
                                                           deferrable=False, plan=_plan(False),
                                                           execution_timeout="timedelta(seconds=20)"))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path), "PYTHONPATH": str(REPO),
           "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env, cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)  # hang guard
    log = done.stdout
    assert emulator.stats()["jobsCreated"] == {"FLEX_START": 1}, log[-3000:]  # no SPOT job
    [job] = every_custom_job(emulator, LOCATION)
    state = requests.get(f"{emulator.url}/v1/{job['name']}", timeout=5).json()["state"]
    assert state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"), (state, log[-3000:])
    assert "AirflowTaskTimeout" in log and "task killed: cancelling" in log, log[-3000:]
    assert "capacity never came" not in log and "falling back to" not in log, log[-3000:]
