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
    emulator.preempt(name)  # SIGTERM: the script checkpoints and exits
    stopped_at = json.loads(checkpoint.read_text())["step"]
    assert 10 <= stopped_at < 60
    emulator.advance(31)  # the service restarts it
    _wait_for(emulator, name, "JOB_STATE_SUCCEEDED")
    job_id = name.rsplit("/", 1)[1]
    first, second = (tmp_path / "logs" / f"{job_id}-{run}.log" for run in (1, 2))
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
