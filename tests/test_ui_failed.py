"""Failed nights in the UI plugin (issue 25): a task that fails pushes its attempts and the error
(XCom ``training_failure``) before it raises, and the plugin shows it: through ``dag.test()``
against the emulator, one run failing for user code and one on its deadline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from airflow_gpu_sched.orchestration.failure_record import FAILURE_KEY, env_values, scrub
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT
from tests.test_dashboard_browser import CHROMIUM, FLAGS

REPO = Path(__file__).resolve().parent.parent
# set to 1 to refresh docs/img/ui-plugin-failed-*.png from this test's screenshots
UPDATE_SCREENSHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
SECRET = "planted-s3cret-value-4711"  # in the job's env: must reach no XCom


def user_code_failure_dag(dag_id: str = "nightly_user_code"):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                            poll_interval=0.02, retries=0, plan=[{"strategy": "SPOT"}],
                            env={"EMULATOR_EXIT_CODE": "1", "HF_TOKEN": SECRET}, **A100)
    return dag


def deadline_dag(dag_id: str = "nightly_deadline"):
    """SPOT finds no capacity (its bound before RUNNING runs out), and by then too little is left
    before the deadline (expected run time 1 h; deadline 1 h 40 s away) for FLEX_START's minimum wait."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    deadline = datetime.now(timezone.utc) + timedelta(hours=1, seconds=40)
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                            poll_interval=0.02, retries=0, deadline=deadline, expected_run_time="1h",
                            plan=[{"strategy": "SPOT", "capacity_wait_timeout": 0.5},
                                  {"strategy": "FLEX_START", "max_wait_duration": "2h"}], **A100)
    return dag


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def run_failing_nights(emulator, suffix: str = ""):
    """Both DAGs, each run once, an hour ago (inside the plugin's "last 3 days"): (user-code run,
    deadline run). ``suffix``: DAG ids of this test's own (the session's DB keeps other tests' runs)."""
    when = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
    user = run_dag(user_code_failure_dag("nightly_user_code" + suffix), logical_date=when)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    late = run_dag(deadline_dag("nightly_deadline" + suffix), logical_date=when)
    return user, late


def test_a_failed_try_pushes_its_attempts_and_the_error_and_no_secret(airflow):
    user, late = run_failing_nights(airflow)
    assert user["train"].state == "failed" and late["train"].state == "failed"
    record = user["train"].xcoms[FAILURE_KEY]
    failure = record["failure"]
    assert failure["kind"] == "TrainingJobFailedNoRetry" and failure["try_number"] == 1
    assert failure["job_name"].startswith(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/")
    assert failure["console_url"].startswith("https://console.cloud.google.com/vertex-ai/")
    assert set(failure["links"]) == {"custom_job", "logs"}
    assert [(a["strategy"], a["state"]) for a in record["attempts"]] == [("SPOT", "JOB_STATE_FAILED")]
    assert "return_value" not in user["train"].xcoms  # the failure is not a result
    every_xcom = json.dumps(user["train"].xcoms)
    assert SECRET not in every_xcom

    record = late["train"].xcoms[FAILURE_KEY]
    assert record["failure"]["kind"] == "DeadlineExceeded"
    assert "FLEX_START" in record["failure"]["message"] and "deadline" in record["failure"]["message"]
    assert [(a["strategy"], a["job_name"] is not None) for a in record["attempts"]] == [("SPOT", True)]


def test_a_failed_job_s_texts_lose_every_env_value_of_the_job():
    wire = {"jobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": [{"name": "A", "value": SECRET},
                                                                       {"name": "B", "value": "1"}]}}, {}]},
            "trialJobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": [{"name": "C", "value": "abcdef"}]}}]}}
    assert env_values(wire) == {SECRET, "1", "abcdef"}
    text = f"Traceback: token={SECRET} step 1 of abcdefg"
    assert scrub(text, env_values(wire)) == "Traceback: token=*** step 1 of ***g"
    assert scrub("x" * 9000, [])[-5:] == "[cut]"


@contextmanager
def airflow_api_server(monkeypatch):
    """Airflow's own api-server app (REST API v2 on the test's metadata DB, the plugins it finds
    by entry point mounted, ours at /gpu-sched) on a real socket; the simple auth manager signs
    every request in as admin, as a deployment with ``simple_auth_manager_all_admins`` does."""
    import socket

    import uvicorn

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    from airflow.api_fastapi.app import create_app, purge_cached_app

    purge_cached_app()
    app = create_app("core")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the api-server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        purge_cached_app()


def _chromium(profile: Path, *args: str) -> str:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=180).stdout


def _failure_rows(dom: str) -> list[str]:
    return re.findall(r'<tr class="failed">.*?</tr>', dom, re.S)


def test_the_plugin_shows_the_failed_nights_at_the_wire_and_in_chromium(airflow, monkeypatch, tmp_path):
    user, late = run_failing_nights(airflow, "_ui")
    with airflow_api_server(monkeypatch) as base:
        # at the wire: the plugin reads the records through the REST API v2 of this api-server
        run_page = f"{base}/gpu-sched/dags/{user.dag_id}/runs/{user.run_id}"
        html = requests.get(run_page, timeout=60)
        assert html.status_code == 200, html.text[-2000:]
        assert '<table id="failures">' in html.text and "TrainingJobFailedNoRetry" in html.text
        assert "train  FAILED: TrainingJobFailedNoRetry" in html.text  # the timeline's task row
        assert "#1 SPOT us-central1" in html.text  # its attempt, drawn
        job = user["train"].xcoms[FAILURE_KEY]["failure"]["job_name"]
        assert f'href="https://console.cloud.google.com/vertex-ai/locations/{LOCATION}/training/' in html.text
        assert job.rsplit("/", 1)[1] in html.text and SECRET not in html.text

        if CHROMIUM is None:
            pytest.skip("chromium not installed (.ci/run installs it): the wire part passed")
        profile = tmp_path / "chromium"
        # the run view: one failed task, its attempt and the error
        dom = _chromium(profile, "--dump-dom", run_page)
        rows = _failure_rows(dom)
        assert len(rows) == 1 and "TrainingJobFailedNoRetry" in rows[0] and "failed, try 1" in rows[0], dom[-3000:]
        # the DAG view of the deadline DAG: the deadline's message, and the SPOT attempt before it
        dom = _chromium(profile, "--dump-dom", f"{base}/gpu-sched/dags/{late.dag_id}?nights=7")
        rows = _failure_rows(dom)
        assert len(rows) == 1 and "DeadlineExceeded" in rows[0] and "FLEX_START skipped" in rows[0], dom[-3000:]
        assert "train  FAILED: DeadlineExceeded" in dom and "#1 SPOT us-central1" in dom
        assert user.dag_id not in dom  # the DAG view is that DAG's only
        # all DAGs: both failed nights (and other tests' runs in the session's DB)
        everything = f"{base}/gpu-sched/?nights=3"
        dom = _chromium(profile, "--dump-dom", everything)
        kinds = sorted(re.search(r'<td class="error">(\w+)</td>', r).group(1) for r in _failure_rows(dom)
                       if f"{user.dag_id}  {user.run_id}" in r or f"{late.dag_id}  {late.run_id}" in r)
        assert kinds == ["DeadlineExceeded", "TrainingJobFailedNoRetry"], dom[-3000:]
        assert SECRET not in dom

        shots = {"ui-plugin-failed-run.png": run_page, "ui-plugin-failed-all.png": everything}
        for name, url in shots.items():
            shot = tmp_path / name
            _chromium(profile, "--window-size=1400,900", f"--screenshot={shot}", url)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
            if UPDATE_SCREENSHOTS:
                shutil.copy(shot, REPO / "docs" / "img" / name)


def test_a_failed_record_s_links_are_console_pages_only_and_its_texts_are_escaped():
    """XCom is written by whatever ran the task: a link elsewhere is no link, a text no markup."""
    from airflow_gpu_sched.ui.page import failure_rows, render
    from airflow_gpu_sched.ui.source import RunRecord, TaskRecord

    links = {"custom_job": "https://console.cloud.google.com/vertex-ai/x", "logs": "javascript:alert(1)",
             "other": "https://evil.example/console.cloud.google.com", "port": "https://console.cloud.google.com:8443/"}
    record = {"attempts": [], "failure": {"kind": "DeadlineExceeded", "message": "<script>x</script>", "links": links,
                                          "log_tail": "<b>line</b>", "try_number": 2}}
    runs = [RunRecord("d", "r", None, "failed", [TaskRecord("t", -1, "up_for_retry", record),
                                                 TaskRecord("ok", -1, "success", {"attempts": [], "failure": {}})])]
    rows = failure_rows(runs, "console.cloud.google.com")
    assert [(r[1], r[2], r[7]) for r in rows] == [
        ("t", "up_for_retry, try 2", [("custom job", "https://console.cloud.google.com/vertex-ai/x")])]
    html = render(runs, "d", [])
    assert "<script>" not in html and "<b>line" not in html and "javascript:" not in html and "evil" not in html
    assert "t  UP_FOR_RETRY: DeadlineExceeded" in html  # no attempt: the row says why instead


@pytest.fixture
def executing(airflow_db, tmp_path, monkeypatch):
    """An emulator that runs each job's command as a local process (its log lines are the
    command's output), fast; ``google_cloud_default`` points at it."""
    from airflow_gpu_sched.emulator import EmulatorServer, Scenario
    from airflow_gpu_sched.emulator.control import EmulatorControl

    with EmulatorServer(Scenario(seed=1, speed=1, execute=True, execute_root=str(tmp_path))) as server:
        control = EmulatorControl(server.url)
        control.reset({"seed": 1, "speed": 50, "queueSeconds": 1, "provisioningSeconds": 5})
        monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": server.url}}))
        yield control
        control.reset({})  # stops the processes


def test_a_secret_the_failing_code_prints_is_cut_from_the_record(executing):
    """The training code prints its env's token, then fails: the task log's tail has the line,
    the record (and so the UI) has it with the value cut out."""
    import sys

    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    script = "import os, sys; print('token=' + os.environ['HF_TOKEN'], file=sys.stderr); sys.exit(3)"
    with DAG("nightly_prints_its_token", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="local",
                            command=[sys.executable, "-c", script], poll_interval=0.05, retries=0,
                            plan=[{"strategy": "SPOT"}], env={"HF_TOKEN": SECRET}, **A100)
    result = run_dag(dag, logical_date=START)
    assert result["train"].state == "failed"
    failure = result["train"].xcoms[FAILURE_KEY]["failure"]
    assert "non-zero status of 3" in failure["detail"]
    assert "token=***" in failure["log_tail"], failure["log_tail"]
    assert SECRET not in json.dumps(result["train"].xcoms)


def test_a_record_whose_last_attempt_never_got_a_job():
    """A quota refusal or a busy pool ends the plan with an attempt without a job: no console page."""
    from airflow_gpu_sched.orchestration.accounting import no_job_record
    from airflow_gpu_sched.orchestration.failure_record import failure_record
    from airflow_gpu_sched.orchestration.plan_engine import Failure

    attempts = [no_job_record("SPOT", "QUOTA_EXCEEDED", 0.0, "quota 0 < 1", location=LOCATION)]
    record = failure_record(attempts, 0, None, None, Failure("QuotaTooLow", "SPOT skipped"), 1, None)
    assert record["console_url"] is None and record["failure"]["console_url"] is None
    assert record["failure"]["kind"] == "QuotaTooLow" and record["attempts"][0]["state"] == "QUOTA_EXCEEDED"
