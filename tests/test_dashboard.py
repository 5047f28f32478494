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
    legend = ["queued", "pending", "running"]  # the swatches after the bars
    assert kinds == ["queued", "pending", "running", *legend]

    result = {"job_name": "projects/p/locations/l/customJobs/2", "attempts": [
        {"strategy": "FLEX_START", "location": "us-central1", "state": "JOB_STATE_FAILED",
         "create_time": "2026-11-30T00:00:00Z", "start_time": None, "end_time": "2026-11-30T02:00:00Z"},
        {"strategy": "SPOT", "location": "us-central1", "state": "JOB_STATE_SUCCEEDED",
         "create_time": "2026-11-30T02:00:00Z", "start_time": "2026-11-30T02:10:00Z",
         "end_time": "2026-11-30T03:00:00Z"}]}
    source = tmp_path / "result.json"
    source.write_text(json.dumps(result))
    out = tmp_path / "xcom.svg"
    subprocess.run([*CLI, "timeline", "--xcom", str(source), "--task", "train", "--out", str(out)], check=True,
                   timeout=60)
    svg = ET.parse(out).getroot()
    kinds = [r.get("class") for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.get("class")]
    assert kinds == ["queued", "queued", "running", *legend]
    texts = ["".join(t.itertext()).strip() for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "train" in texts and "#1 FLEX_START us-central1" in texts and "#2 SPOT us-central1" in texts
    assert any("-> 03:00 UTC (3h00m)" in t for t in texts)
    # the second attempt came by a fallback (another strategy): its marker is drawn
    assert [g.get("class") for g in svg.iter("{http://www.w3.org/2000/svg}g")][0] == "mark fell-back"


def test_timeline_of_a_run_s_tasks_from_their_xcom_results(tmp_path):
    """``--xcom`` of {task id: return value}: a row per task and attempt, every preemption marked."""
    from tests.test_timeline import CANCELLED, PLAN

    source = tmp_path / "night.json"
    source.write_text(json.dumps({"train_with_a_plan": PLAN, "evaluate_on_gpu": CANCELLED}))
    out = tmp_path / "night.svg"
    printed = subprocess.run([*CLI, "timeline", "--xcom", str(source), "--title", "nightly 2026-11-30",
                              "--out", str(out)], check=True, timeout=60, capture_output=True, text=True).stdout
    assert f"timeline written to {out}" in printed
    svg = ET.parse(out).getroot()
    texts = ["".join(t.itertext()).strip() for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert texts.index("train_with_a_plan") < texts.index("#4 SPOT us-central1") < texts.index("evaluate_on_gpu")
    marks = [(g.get("class"), g.get("data-count")) for g in svg.iter("{http://www.w3.org/2000/svg}g")]
    assert ("mark preempted", "7") in marks and ("mark cancelled", "1") in marks
