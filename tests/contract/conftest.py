"""Where the contract suite runs: the emulator (default) or real Vertex AI (VERTEX_CONTRACT_PROJECT
set), and the report of what the target answered. See test_vertex_contract.py for the command."""

from __future__ import annotations

import json
import os
import platform
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient
from airflow_gpu_sched.vertex.client.endpoints import api_root

PROJECT_ENV, LOCATION_ENV, REPORT_ENV, IMAGE_ENV = (
    "VERTEX_CONTRACT_PROJECT", "VERTEX_CONTRACT_LOCATION", "VERTEX_CONTRACT_REPORT", "VERTEX_CONTRACT_IMAGE")
AGAINST_GOOGLE = bool(os.environ.get(PROJECT_ENV))
# The emulator at 100x: queued 1 s, provisioning 10 s, a 30 s run: a life cycle in ~0.5 s of real time.
EMULATOR_SCENARIO = {"seed": 7, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30,
                     "cancelSeconds": 2}
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class Target:
    """One Vertex AI to hold to the contract: its client, raw HTTP (for requests our client would
    refuse to send) and how patiently to poll it."""

    def __init__(self, kind: str, project: str, location: str, api_endpoint: str | None,
                 poll_interval: float, wait_seconds: float, http: requests.Session):
        self.kind, self.project, self.location, self.api_endpoint = kind, project, location, api_endpoint
        self.poll_interval, self.wait_seconds = poll_interval, wait_seconds
        self.parent = f"projects/{project}/locations/{location}"
        self.root = api_root(location, api_endpoint)
        self._http = http
        self.run_id = f"c{uuid.uuid4().hex[:10]}"  # a label value: only this run's jobs match it
        self.image = os.environ.get(IMAGE_ENV, "python:3.11-slim")  # Docker Hub: allowed for custom training
        self.created: list[str] = []  # every job this run made, cancelled at the end if still alive

    def client(self) -> VertexClient:
        return VertexClient(location=self.location, project=self.project, api_endpoint=self.api_endpoint,
                            retry=RetryPolicy(initial=0.5, maximum=5.0, deadline=60.0))

    def http(self, method: str, path: str, **kw: Any) -> requests.Response:
        """``method /v1/{path}`` as is (``path`` relative to the v1 root)."""
        return self._http.request(method, self.root + path, timeout=60, **kw)


def _google_target(project: str, location: str) -> Target:
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])  # ADC or GOOGLE_APPLICATION_CREDENTIALS
    return Target("google", project, location, None, poll_interval=10.0, wait_seconds=45 * 60,
                  http=AuthorizedSession(credentials))


@pytest.fixture(scope="module")
def target(request) -> Target:
    if AGAINST_GOOGLE:
        found = _google_target(os.environ[PROJECT_ENV], os.environ.get(LOCATION_ENV, "us-central1"))
    else:
        from airflow_gpu_sched.emulator.control import EmulatorControl
        from tests.conftest import LOCATION, PROJECT

        server = request.getfixturevalue("emulator_server")
        EmulatorControl(server.url).reset(EMULATOR_SCENARIO)
        found = Target("emulator", PROJECT, LOCATION, server.url, poll_interval=0.01, wait_seconds=30,
                       http=requests.Session())
    yield found
    with found.client() as client:  # nothing this run made may keep running (and billing)
        for name in found.created:
            try:
                if not client.get_custom_job(name).is_terminal():
                    client.cancel_custom_job(name)
            except Exception as exc:  # noqa: BLE001 (report it, keep cleaning up)
                print(f"contract clean-up: could not cancel {name}: {exc}")


# ------------------------------------------------------------------------------ the report

_REPORT: dict[str, Any] = {"checks": {}}


@pytest.fixture
def observe(request) -> dict:
    """A dict this test fills with what the target answered; it lands in the report."""
    entry: dict[str, Any] = {}
    _REPORT["checks"][request.node.name] = entry
    return entry


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    entry = _REPORT["checks"].get(item.name)
    if entry is not None and (report.when == "call" or report.outcome != "passed"):
        entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        if report.failed:  # the assertion's own lines ("E   ..."), not the whole traceback
            lines = [line[1:].strip() for line in report.longreprtext.splitlines() if line.startswith("E ")]
            entry["failure"] = "\n".join(lines[:30]) or report.longreprtext[-2000:]


def pytest_sessionfinish(session, exitstatus):
    if not _REPORT["checks"]:
        return
    path = os.environ.get(REPORT_ENV) or ("contract-report.json" if AGAINST_GOOGLE else None)
    if path is None:
        return  # against the emulator, a report only when asked for
    from importlib.metadata import version

    _REPORT.update({
        "target": "google" if AGAINST_GOOGLE else "emulator",
        "location": os.environ.get(LOCATION_ENV, "us-central1"),  # no project id: the file is for sharing
        "written": datetime.now(timezone.utc).isoformat(), "client": f"airflow-gpu-sched {version('airflow-gpu-sched')}",
        "python": platform.python_version()})
    Path(path).write_text(json.dumps(_REPORT, indent=2, sort_keys=True) + "\n")
    print(f"\ncontract report: {Path(path).resolve()}")
