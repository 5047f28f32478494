"""The UI plugin in a deployed Airflow (api-server etc. on PostgreSQL), seen in headless Chromium.

A training DAG runs against the emulator (FLEX_START runs out of its wait and falls back to SPOT,
which the test preempts past the service's restarts, so the plan resubmits it); then Chromium
opens the plugin's page for the run, as a signed-in browser does, and the test reads what it
rendered: a row per task and attempt, the markers, the wait table. Screenshots of the page and
of Airflow's own DAG-run page with the plugin's tab are kept in ``.e2e-artifacts/ui-plugin/``
(or ``$E2E_ARTIFACTS``; the paths are printed). The deployment loads the plugin from its plugins
folder: the venv's editable install of the package may predate the ``airflow.plugins`` entry
point (which tests/test_ui.py checks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.vertex.client import VertexClient
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available
from tests.test_dashboard_browser import CHROMIUM, FLAGS

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")]

DAG_ID = "e2e_ui"
# provisioning takes 3 s of real time, so that the 1-second polls see the service's restart
SCENARIO = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 300, "maxServiceRestarts": 1,
            # no A100 for FLEX_START in us-central1 (its 20-minute wait runs out); some in us-east4
            "capacity": [{"location": "us-central1", "acceleratorType": "NVIDIA_TESLA_A100", "flexStart": 0}]}
REPO = Path(__file__).resolve().parents[2]
PLUGIN = "from airflow_gpu_sched.ui.plugin import GpuSchedPlugin  # the entry point's class, for this deployment\n"


def _preempt_first_spot_job_twice(emulator: EmulatorControl, client: VertexClient, stop: threading.Event) -> None:
    """Preempt the first SPOT job each time it has run 2.5 s (so that the 1-second polls saw it
    RUNNING): once restarted by the service, then failed."""
    done, running_since = 0, None
    while done < 2 and not stop.is_set():
        jobs = [j for j in client.list_custom_jobs(filter=f'labels.airflow-dag="{DAG_ID}"')
                if j.job_spec.strategy.value == "SPOT"]
        first = jobs[-1] if jobs else None  # newest first
        if first is not None and first.state.value == "JOB_STATE_RUNNING":
            running_since = running_since or time.monotonic()
            if time.monotonic() - running_since >= 2.5:
                emulator.preempt(first.name)
                done, running_since = done + 1, None
        else:
            running_since = None
        time.sleep(0.2)


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def test_the_plugin_shows_every_attempt_of_the_run_in_chromium(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster)")
    root = tmp_path_factory.mktemp("e2e_ui")
    dags = dags_folder(root, ("_e2e_task.py", "e2e_ui.py"))
    with EmulatorServer() as server, PostgresCluster() as pg:
        emulator = EmulatorControl(server.url)
        emulator.reset(SCENARIO)
        conn = {"conn_type": "google_cloud_platform", "extra": {"project": "e2e-project", "api_endpoint": server.url}}
        airflow = AirflowDeployment(root / "home", pg.url, dags, {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn)})
        (airflow.home / "plugins" / "gpu_sched_plugin.py").write_text(PLUGIN)
        with airflow:
            plugins = airflow.api("GET", "plugins")["plugins"]
            mine = next(p for p in plugins if p["name"] == "airflow_gpu_sched")
            assert {v["destination"] for v in mine["external_views"]} == {"dag_run", "dag", "nav"}
            assert [a["url_prefix"] for a in mine["fastapi_apps"]] == ["/gpu-sched"]

            client = VertexClient(location="us-central1", project="e2e-project", api_endpoint=server.url)
            stop = threading.Event()
            preempter = threading.Thread(target=_preempt_first_spot_job_twice, args=(emulator, client, stop),
                                         daemon=True)
            preempter.start()
            run_id = airflow.trigger(DAG_ID)
            state = airflow.wait(DAG_ID, run_id, timeout=300)
            stop.set()
            states = {t["task_id"]: t["state"] for t in airflow.task_instances(DAG_ID, run_id)}
            assert state == "success", f"run ended {state}: {states}\n{airflow.logs()[-30000:]}"

            profile = root / "chromium"
            url = f"{airflow.api_url}/gpu-sched/dags/{DAG_ID}/runs/{run_id}"
            dom = _chromium(profile, "--dump-dom", url).stdout
            svg_text = re.search(r"<svg.*?</svg>", dom, re.S).group(0)
            svg = ET.fromstring(svg_text)
            ns = "{http://www.w3.org/2000/svg}"
            texts = ["".join(t.itertext()) for t in svg.iter(f"{ns}text")]
            # a row per task, and under it a row per attempt with its strategy and region
            assert "train" in texts and "train_small" in texts, texts
            assert [t.strip() for t in texts if t.startswith("  #")] == [
                "#1 FLEX_START us-central1", "#2 SPOT us-central1", "#3 SPOT us-central1", "#1 FLEX_START us-east4"]
            marks = {}
            for g in svg.iter(f"{ns}g"):
                kind = (g.get("class") or "").removeprefix("mark ")
                marks[kind] = marks.get(kind, 0) + int(g.get("data-count") or 0)
            # the two preemptions of the first SPOT job (one service restart, then the last) as the
            # task's XCom counts them, the fallback from FLEX_START and the resubmission; plus one
            # of each in the legend
            xcom = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train/xcomEntries/return_value")
            assert xcom["value"]["preemptions"] == 2, xcom["value"]
            assert marks["preempted"] == 2 + 1 and marks["fell-back"] == 1 + 1 and marks["resubmitted"] == 1 + 1
            assert any(t.startswith("SUCCEEDED") and "USD" in t for t in texts)  # figures with cost per attempt
            assert '<table id="waits">' in dom and "FLEX_START us-central1 &gt; SPOT us-central1" in dom

            artifacts = Path(root / "artifacts")
            artifacts.mkdir()
            shot = artifacts / "gpu-sched-run.png"
            _chromium(profile, "--window-size=1400,760", f"--screenshot={shot}", url)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
            # Airflow's own DAG-run page, with the plugin's tab open (the React UI loads it in a frame)
            tab = artifacts / "airflow-ui-run-tab.png"
            _chromium(profile, "--window-size=1600,1000", "--virtual-time-budget=20000", f"--screenshot={tab}",
                      f"{airflow.api_url}/dags/{DAG_ID}/runs/{run_id}/plugin/gpu-training-run")
            assert tab.exists() and tab.stat().st_size > 20_000
            # the plugin calls the API on its own socket: a forged Host header changes nothing
            forged = airflow.session.get(url, headers={"Host": "203.0.113.7:9"}, timeout=60)
            assert forged.status_code == 200 and "#3 SPOT us-central1" in forged.text
            # the DAG's last nights, and every DAG's, render too
            for page in (f"{airflow.api_url}/gpu-sched/dags/{DAG_ID}?nights=7", f"{airflow.api_url}/gpu-sched/"):
                assert "#3 SPOT us-central1" in _chromium(profile, "--dump-dom", page).stdout
            # kept past pytest's rotation of its temporary folders
            kept = Path(os.environ.get("E2E_ARTIFACTS", REPO / ".e2e-artifacts")) / "ui-plugin"
            shutil.copytree(artifacts, kept, dirs_exist_ok=True)
            print(f"\nscreenshots: {kept}/gpu-sched-run.png {kept}/airflow-ui-run-tab.png")
