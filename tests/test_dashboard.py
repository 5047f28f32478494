"""The emulator's dashboard and the timeline pictures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import requests

from tests.conftest import LOCATION, with_a100_pool
from tests.test_emulator import job

CLI = [sys.executable, "-m", "airflow_gpu_sched.tools.cli"]


def _jobs_url(emulator) -> str:
    return f"{emulator.url}/v1/projects/test-project/locations/{LOCATION}/customJobs"


def test_dashboard_shows_jobs_timelines_capacity_and_pools(emulator):
    emulator.reset({**with_a100_pool(), "speed": 1})
    spot = requests.post(_jobs_url(emulator), json=job("SPOT", run_seconds=600), timeout=5).json()["name"]
    requests.post(_jobs_url(emulator), json=job("FLEX_START"), timeout=5).raise_for_status()
    emulator.advance(40)
    emulator.preempt(spot)
    emulator.advance(100)
    page = requests.get(f"{emulator.url}/", timeout=5)
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<meta http-equiv="refresh"' in html
    assert html.count('<tr class="job">') == 2
    assert "SPOT" in html and "FLEX_START" in html
    assert html.count("seg preempted") == 1 and "seg running" in html and "seg queued" in html
    assert re.search(r"NVIDIA_TESLA_A100</td><td>spot</td><td>.*?1 of 64 used", html)
    assert "pool-a" in html and "0 of 1 replicas used" in html


def test_timeline_svg_from_the_emulator_and_from_an_xcom_result(emulator, tmp_path):
    requests.post(_jobs_url(emulator), json=job("STANDARD", run_seconds=60), timeout=5).raise_for_status()
    emulator.advance(200)
    out = tmp_path / "emulator.svg"
    subprocess.run([*CLI, "timeline", "--emulator", emulator.url, "--out", str(out)], check=True, timeout=60)
    svg = ET.parse(out).getroot()
    kinds = [r.get("class") for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.get("class")]
    assert kinds == ["queued", "pending", "running"]

    result = {"job_name": "projects/p/locations/l/customJobs/2", "attempts": [
        {"strategy": "FLEX_START", "location": "us-central1", "state": "JOB_STATE_FAILED",
         "create_time": "2026-11-30T00:00:00Z", "start_time": None, "end_time": "2026-11-30T02:00:00Z"},
        {"strategy": "SPOT", "location": "us-central1", "state": "JOB_STATE_SUCCEEDED",
         "create_time": "2026-11-30T02:00:00Z", "start_time": "2026-11-30T02:10:00Z",
         "end_time": "2026-11-30T03:00:00Z"}]}
    source = tmp_path / "result.json"
    source.write_text(json.dumps(result))
    out = tmp_path / "xcom.svg"
    subprocess.run([*CLI, "timeline", "--xcom", str(source), "--out", str(out)], check=True, timeout=60)
    svg = ET.parse(out).getroot()
    kinds = [r.get("class") for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.get("class")]
    assert kinds == ["queued", "queued", "running"]
    assert "180 min" in out.read_text()
