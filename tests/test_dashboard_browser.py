"""The dashboard in a real browser: Debian's headless Chromium (installed by .ci/run)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import requests

from tests.conftest import LOCATION
from tests.test_emulator import job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")


def test_chromium_renders_the_dashboard_while_jobs_run(emulator, tmp_path):
    jobs = f"{emulator.url}/v1/projects/test-project/locations/{LOCATION}/customJobs"
    for strategy in ("SPOT", "FLEX_START", "STANDARD"):
        requests.post(jobs, json=job(strategy, run_seconds=3600), timeout=5).raise_for_status()
    emulator.advance(60)  # all three running now
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", f"{emulator.url}/"],
                         capture_output=True, text=True, timeout=120).stdout
    assert dom.count('<tr class="job">') == 3
    assert dom.count("seg running") == 3 and "RUNNING" in dom
    shot = tmp_path / "dashboard.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,800",
                    f"--screenshot={shot}", f"{emulator.url}/"], capture_output=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    shutil.copy(shot, tmp_path.parent / "dashboard.png")  # kept with pytest's temp files for a look
