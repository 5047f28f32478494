"""The command line, as a user runs it: `airflow-gpu-sched emulator` in its own process, driven by curl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA

CLI = [sys.executable, "-m", "airflow_gpu_sched.tools.cli"]


@pytest.fixture
def emulator_process(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("seed: 1\nspeed: 1\ncapacity:\n  - {location: us-central1, acceleratorType: NVIDIA_L4, flexStart: 2}\n")
    process = subprocess.Popen([*CLI, "emulator", "--port", "0", "--scenario", str(scenario), "--speed", "50"],
                               stdout=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("Vertex AI emulator listening on http://127.0.0.1:")
        yield first.strip().rsplit(" ", 1)[-1]
    finally:
        process.terminate()
        process.wait(timeout=10)


def curl(*args: str) -> tuple[int, dict]:
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True, text=True,
                         check=True).stdout
    body, _, code = out.rpartition("\n")
    return int(code), json.loads(body)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_emulator_serves_seeds_rejects_t4_and_filters_by_label(emulator_process, tmp_path):
    jobs = f"{emulator_process}/v1/projects/p/locations/us-central1/customJobs"
    for seed in ("seed_000_flex_start.json", "seed_001_spot.json"):
        body = json.loads((DATA / seed).read_text())
        body["labels"] = {"seed": seed[:8].replace("_", "-")}
        path = tmp_path / seed
        path.write_text(json.dumps(body))
        code, created = curl("-X", "POST", "-H", "Content-Type: application/json", "-d", f"@{path}", jobs)
        assert code == 200 and created["state"] == "JOB_STATE_PENDING"  # the create answer (recorded)

    t4 = json.loads((DATA / "seed_000_flex_start.json").read_text())
    t4["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineType="n1-standard-4",
                                                               acceleratorType="NVIDIA_TESLA_T4")
    code, error = curl("-X", "POST", "-H", "Content-Type: application/json", "-d", json.dumps(t4), jobs)
    assert code == 400 and "acceleratorType" in error["error"]["message"]

    code, listed = curl("-G", "--data-urlencode", 'filter=labels.seed="seed-001"', jobs)
    assert code == 200 and [j["displayName"] for j in listed["customJobs"]] == ["JOB_NAME"]

    code, stats = curl(f"{emulator_process}/emulator/v1/stats")
    assert stats["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1}
    assert {"location": "us-central1", "acceleratorType": "NVIDIA_L4",
            "standard": {"total": 64, "used": 0}, "spot": {"total": 64, "used": 0},
            "flexStart": {"total": 2, "used": 0}} in stats["capacity"]
    code, clock = curl(f"{emulator_process}/emulator/v1/clock")
    assert clock["speed"] == 50  # --speed overrides the scenario's


def test_emulator_refuses_a_non_loopback_host_unless_asked():
    result = subprocess.run([*CLI, "emulator", "--host", "0.0.0.0", "--port", "0"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "loopback only" in result.stderr
    assert "no authentication" in result.stderr and "--allow-remote" in result.stderr  # says why, and how


def test_emulator_binds_a_non_loopback_host_when_told_explicitly():
    process = subprocess.Popen([*CLI, "emulator", "--host", "0.0.0.0", "--port", "0", "--allow-remote"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("Vertex AI emulator listening on http://0.0.0.0:"), first + process.stderr.read()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_emulator_server_refuses_a_non_loopback_host_unless_asked():
    from airflow_gpu_sched.emulator import EmulatorServer

    with pytest.raises(ValueError, match="loopback only: it has no authentication"):
        EmulatorServer(host="0.0.0.0")
    EmulatorServer(host="0.0.0.0", allow_remote=True).stop()  # told explicitly: binds


def test_demo_runs_each_strategy_to_success():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([*CLI, "demo", "--strategies", "--speed", "600"], capture_output=True, text=True, timeout=300,
                            env=env, cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All three jobs succeeded." in result.stdout
    assert "spot        preempted" in result.stdout


@pytest.mark.timeout(1200)  # a hang guard, not a speed check: seven DAGs, ~4 min on a quiet machine
def test_the_main_job_runs_nightly_retraining_through_airflow_dags_test(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([*CLI, "demo"], capture_output=True, text=True, timeout=1100, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "nightly_retraining jobs: QUEUED: 1" in out  # it waited for the FLEX_START capacity
    assert "spot_training jobs: FAILED: 1, SUCCEEDED: 1" in out  # stocked out once, resubmitted, succeeded
    assert "the SPOT training script resumed" in out and "nightly_retraining succeeded" in out
    # the summary names every DAG it ran and its result (issue 41: its last line named 4 of 7)
    assert "the demo ran 7 example DAGs in " in out and "all succeeded" in out
    for dag_id in ("nightly_retraining", "spot_training", "persistent_resource_training", "nightly_retraining_tuned",
                   "nightly_deploy", "race_training", "race_training_sequential"):
        assert f"\n  {dag_id} succeeded\n" in out, dag_id
    assert "registered model nightly-model: projects/demo-project/locations/us-central1/models/" in out
    assert "nightly_deploy read the model event: projects/demo-project/locations/us-central1/models/" in out
    assert (tmp_path / ".demo" / "timeline.svg").read_text().startswith("<svg")
    _check_demo_timeline(tmp_path / ".demo" / "timeline.svg")


def _check_demo_timeline(path: Path) -> None:
    """The demo's night: a row per training task and job, the SPOT job's 7 preemptions each marked
    (6 service restarts and the last), the resubmission after them."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    svg = ET.parse(path).getroot()
    texts = ["".join(t.itertext()).strip() for t in svg.iter(f"{ns}text")]
    for task in ("train", "train_on_spot", "train_on_pool", "tune", "train_and_register"):
        assert task in texts, texts
    spot = texts.index("train_on_spot")
    assert texts[spot + 2:spot + 6:2] == ["#1 SPOT us-central1", "#2 SPOT us-central1"], texts[spot:spot + 8]
    assert texts[spot + 3].startswith("PREEMPTED") and texts[spot + 5].startswith("SUCCEEDED")
    marks = [g.get("class") for g in svg.iter(f"{ns}g")]
    assert marks.count("mark preempted") == 7 + 1 and marks.count("mark resubmitted") == 1 + 1  # + the legend
    assert sum(t.startswith("trial ") for t in texts) == 4  # the tuning job's trials
