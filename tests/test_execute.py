"""--execute: the job's command runs as a local process; a preemption sends SIGTERM and the
restarted job resumes from its checkpoint (the contract of dags_examples/training/train.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import requests

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.conftest import LOCATION, PROJECT

TRAIN = Path(__file__).parent.parent / "dags_examples" / "training" / "train.py"


def _state(emulator, name: str) -> str:
    return requests.get(f"{emulator.url}/v1/{name}", timeout=5).json()["state"]


def _wait_for(emulator, name: str, state: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while _state(emulator, name) != state:
        assert time.monotonic() < deadline, f"{name} never reached {state}"
        time.sleep(0.05)


@pytest.fixture
def executing(tmp_path):
    """An emulator started with execution on (as the CLI's --execute): a reset over HTTP cannot
    switch it on (tests/test_emulator_security.py), and keeps it on."""
    with EmulatorServer(Scenario(seed=1, speed=1, execute=True, execute_root=str(tmp_path))) as server:
        control = EmulatorControl(server.url)
        control.reset({"seed": 1, "speed": 1})
        yield control
        control.reset({})  # stops the processes


def test_a_preempted_job_resumes_from_its_checkpoint(executing, tmp_path):
    emulator = executing
    body = {"displayName": "resume", "jobSpec": {
        "workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                             "acceleratorCount": 1}, "replicaCount": "1",
                             "containerSpec": {"imageUri": "local", "command": [sys.executable, str(TRAIN)],
                                               "args": ["--steps=60", "--step-seconds=0.05", "--checkpoint-every=5"]}}],
        "scheduling": {"strategy": "SPOT"}, "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/run-1"}}}
    name = requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", json=body,
                         timeout=5).json()["name"]
    emulator.advance(31)
    assert _state(emulator, name) == "JOB_STATE_RUNNING"
    checkpoint = tmp_path / "bucket" / "run-1" / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 30
    while not (checkpoint.exists() and json.loads(checkpoint.read_text())["step"] >= 10):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    emulator.preempt(name)  # SIGTERM: the script checkpoints and exits (the emulator does not wait for it)
    job_id = name.rsplit("/", 1)[1]
    first = tmp_path / "logs" / f"{job_id}-1.log"
    deadline = time.monotonic() + 30
    while "SIGTERM: checkpointed" not in first.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stopped_at = json.loads(checkpoint.read_text())["step"]
    assert 10 <= stopped_at < 60
    emulator.advance(31)  # the service restarts it
    _wait_for(emulator, name, "JOB_STATE_SUCCEEDED")
    second = tmp_path / "logs" / f"{job_id}-2.log"
    assert f"SIGTERM: checkpointed at step {stopped_at}" in first.read_text()
    assert f"resuming from step {stopped_at}" in second.read_text()
    assert json.loads(checkpoint.read_text())["step"] == 60


def test_a_failing_command_fails_the_job_with_its_exit_status(executing, tmp_path):
    emulator = executing
    body = {"displayName": "boom", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "local", "command": [sys.executable, "-c", "raise SystemExit(7)"]}}]}}
    name = requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", json=body,
                         timeout=5).json()["name"]
    emulator.advance(31)
    _wait_for(emulator, name, "JOB_STATE_FAILED")
    error = requests.get(f"{emulator.url}/v1/{name}", timeout=5).json()["error"]
    assert "non-zero status of 7" in error["message"]


# ---------------------------------------------------------------- contained (issue 37)


def _create(emulator, command: list[str], output: str | None = None) -> requests.Response:
    spec = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                 "containerSpec": {"imageUri": "local", "command": command}}]}
    if output is not None:
        spec["baseOutputDirectory"] = {"outputUriPrefix": output}
    return requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                         json={"displayName": "contained", "jobSpec": spec}, timeout=10)


@pytest.mark.parametrize("output", ["gs://b/../../escaped", "gs://../escaped", "/tmp/escaped-abs",
                                    "escaped-relative", "file:///tmp/escaped"])
def test_an_output_directory_outside_the_execute_root_is_refused_at_create(executing, tmp_path, output):
    response = _create(executing, [sys.executable, "-c", "pass"], output)
    assert response.status_code == 400, response.text[:300]
    assert "baseOutputDirectory.outputUriPrefix" in response.json()["error"]["message"]
    executing.advance(31)
    assert not (tmp_path.parent / "escaped").exists() and not Path("/tmp/escaped-abs").exists()
    assert _create(executing, [sys.executable, "-c", "pass"], "gs://bucket/run-1/../run-2").status_code == 200


def _wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has died
    except FileNotFoundError:
        return False


def _dies(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ignores SIGTERM, starts a grandchild, writes both pids, then sleeps
STUBBORN = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "open(sys.argv[1], 'w').write(f'{os.getpid()} {child.pid}\\n'); time.sleep(600)")


def test_cancelling_a_job_that_ignores_sigterm_does_not_block_the_emulator(executing, tmp_path):
    pids = tmp_path / "pids"
    name = _create(executing, [sys.executable, "-c", STUBBORN, str(pids)]).json()["name"]
    executing.advance(31)
    parent, child = map(int, _wait_for_file(pids).split())
    cancelled = requests.post(f"{executing.url}/v1/{name}:cancel", json={}, timeout=30)
    assert cancelled.status_code == 200
    # the process ignores SIGTERM: it dies only by the SIGKILL after the grace period, so an
    # answer while it lives is one the emulator gave without waiting for it
    assert _alive(parent), "the cancel waited for the process (the event loop was blocked)"
    assert requests.get(f"{executing.url}/emulator/v1/stats", timeout=10).status_code == 200
    assert _dies(parent) and _dies(child)  # SIGKILL to the whole group after the grace period


def test_job_processes_die_with_the_emulator(tmp_path):
    from airflow_gpu_sched.emulator import EmulatorServer, Scenario

    pids = tmp_path / "pids"
    server = EmulatorServer(Scenario(seed=1, execute=True, execute_root=str(tmp_path))).start()
    try:
        control = EmulatorControl(server.url)
        _create(control, [sys.executable, "-c", STUBBORN, str(pids)])
        control.advance(31)
        parent, child = map(int, _wait_for_file(pids).split())
    finally:
        server.stop()
    assert _dies(parent) and _dies(child)


def test_job_processes_die_with_a_sigkilled_emulator(tmp_path):
    import signal
    import subprocess

    pids = tmp_path / "pids"
    process = subprocess.Popen([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--port", "0",
                                "--execute", "--execute-root", str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        url = next(line.split()[-1] for line in process.stdout if "listening on" in line)
        _create(EmulatorControl(url), [sys.executable, "-c", "import os, sys, time; "
                                       "open(sys.argv[1], 'w').write(f'{os.getpid()}\\n'); time.sleep(600)",
                                       str(pids)])
        EmulatorControl(url).advance(31)
        pid = int(_wait_for_file(pids))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert _dies(pid), "the job's process outlived its SIGKILLed emulator"


def test_the_demo_runs_its_executing_emulator_with_a_control_token(tmp_path):
    from airflow_gpu_sched.emulator import Scenario
    from airflow_gpu_sched.tools.demo import demo_emulator

    with demo_emulator(Scenario(execute=True, execute_root=str(tmp_path))) as server:
        assert server.control_token
        assert requests.get(f"{server.url}/emulator/v1/stats", timeout=10).status_code == 401
        assert EmulatorControl(server.url, control_token=server.control_token).stats() is not None
