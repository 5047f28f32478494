"""Shared fixtures: one emulator (a real HTTP server) per test session, reset for every test."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import interrupt
from tests.airflow_harness import airflow_db, set_airflow_env  # noqa: F401 (fixture; imports no airflow)

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl

DATA = Path(__file__).parent / "data"


def pytest_configure(config):
    # Airflow reads its config at import: point it at a throwaway home before anything imports it
    # (one per process: each pytest-xdist worker has its own home and SQLite metadata DB).
    home = tempfile.mkdtemp(prefix="airflow_home_")
    set_airflow_env(home)
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    interrupt.install()


# Tests that write into the checkout or compare it before and after (the docs site builds into
# site/ and .docs-src/; the wheel test copies the tree and checks its build wrote nothing there):
# under pytest-xdist (--dist loadgroup, make check) they run on one worker, one after the other.
CHECKOUT_GROUP = {"test_docs_site.py", "test_wheel.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in CHECKOUT_GROUP:
            item.add_marker(pytest.mark.xdist_group("checkout"))


PROJECT, LOCATION = "test-project", "us-central1"


@pytest.fixture(scope="session")
def emulator_server():
    with EmulatorServer() as server:
        yield server


@pytest.fixture
def emulator(emulator_server) -> EmulatorControl:
    """A fresh emulator at speed 1: tests move emulated time with ``emulator.advance(s)``."""
    from airflow_gpu_sched.orchestration import stops
    from airflow_gpu_sched.vertex import service_clock

    stops.forget()  # the reset emulator hands out the same job names again: no cancel of ours is theirs
    service_clock.reset()  # a fresh emulator is a new service clock (another test's speed is not its rate)
    control = EmulatorControl(emulator_server.url)
    control.reset({"seed": 7, "speed": 1})
    return control


@pytest.fixture
def parent() -> str:
    return f"projects/{PROJECT}/locations/{LOCATION}"



def every_custom_job(emulator, location: str = LOCATION) -> list[dict]:
    """Every custom job of ``location``, every page (a page may be empty and carry a token: the
    variant listPages), read straight from the emulator's REST API."""
    import requests

    found, params = [], {}
    while True:
        page = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{location}/customJobs",
                            params=params, timeout=5).json()
        found += page.get("customJobs", [])
        if not page.get("nextPageToken"):
            return found
        params = {"pageToken": page["nextPageToken"]}

def load_seed(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.fixture
def vertex_conn(emulator, monkeypatch) -> EmulatorControl:
    """``google_cloud_default`` pointing at the emulator (as a user's connection would)."""
    extra = {"project": PROJECT, "api_endpoint": emulator.url}
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT",
                       json.dumps({"conn_type": "google_cloud_platform", "extra": extra}))
    return emulator


FAST = {"seed": 7, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30,
        "persistentProvisioningSeconds": 1, "cancelSeconds": 2}


@pytest.fixture
def fast_emulator(vertex_conn) -> EmulatorControl:
    """The emulator at 100x: a 30-second job takes 0.3 s of real time."""
    vertex_conn.reset(FAST)
    return vertex_conn


def with_a100_pool(resource_id: str = "pool-a", replicas: int = 1) -> dict:
    """The FAST scenario plus a RUNNING persistent resource with one pool of a2-highgpu-1g."""
    pool = {"id": "a100s", "replicaCount": str(replicas), "machineSpec": {
        "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}
    return {**FAST, "persistentResources": [{"project": PROJECT, "location": LOCATION, "id": resource_id,
                                             "resource": {"displayName": resource_id, "resourcePools": [pool]}}]}


# The emulator's assumed behaviours (Scenario.variants, docs/fidelity.md): the operators must
# decide the same way under each. "as-today" is the default; the others change one assumption,
# "all-alternatives" every one at once.
VARIANTS = {
    "as-today": {},
    "spot-restarts-invisible": {"spotRestarts": "invisible"},
    "errors-message-only": {"errorDetails": "message_only"},
    "flex-expiry-expired": {"flexStartExpiry": "expired"},
    "flex-waits-pending": {"flexStartWaitingState": "JOB_STATE_PENDING"},
    "reservation-full-fails": {"reservationFull": "failed"},
    "list-pages-short": {"listPages": "short"},
    "cancel-ends-succeeded": {"cancelOutcome": "succeeded"},
    "cancel-ends-failed": {"cancelOutcome": "failed"},
    "cancel-of-ended-is-noop": {"cancelEnded": "noop"},
    "flex-expiry-cancelled": {"flexStartExpiry": "cancelled"},
    "timeout-cancelled": {"timeoutOutcome": "cancelled"},
    "start-time-first-running": {"startTime": "first_running"},  # the old behaviour stays covered
    "pipeline-running-when-its-job-runs": {"pipelineRunning": "job_running"},  # the old default (issue 40)
    "tuning-running-when-a-trial-is-created": {"tuningRunning": "trial_created"},
    "all-alternatives": {"spotRestarts": "invisible", "errorDetails": "message_only",
                         "flexStartExpiry": "cancelled", "flexStartWaitingState": "JOB_STATE_PENDING",
                         "reservationFull": "failed", "timeoutOutcome": "cancelled", "listPages": "short",
                         "cancelOutcome": "succeeded", "cancelEnded": "noop", "pipelineRunning": "job_running",
                         "tuningRunning": "trial_created"},
}
# EMULATOR_VARIANTS='{"cancelOutcome": "succeeded"}' pytest tests/test_races.py runs a whole file with
# these variants merged into every reset of the emulator (the variants win over the test's own).
FORCED_VARIANTS = json.loads(os.environ.get("EMULATOR_VARIANTS") or "{}")


@pytest.fixture(autouse=True, scope="session")
def _forced_variants():
    if not FORCED_VARIANTS:
        yield
        return
    original = EmulatorControl.reset

    def reset(self, scenario: dict | None = None) -> None:
        scenario = dict(scenario or {})
        scenario["variants"] = {**scenario.get("variants", {}), **FORCED_VARIANTS}
        original(self, scenario)

    EmulatorControl.reset = reset
    yield
    EmulatorControl.reset = original


@pytest.fixture(params=list(VARIANTS.values()), ids=list(VARIANTS))
def variant_emulator(vertex_conn, request) -> EmulatorControl:
    """:func:`fast_emulator` under each variant of the assumed behaviours; ``.scenario`` is
    the scenario it was reset with (reset with ``{**emulator.scenario, ...}`` to keep the variant)."""
    vertex_conn.scenario = {**FAST, "variants": request.param}
    vertex_conn.reset(vertex_conn.scenario)
    return vertex_conn
