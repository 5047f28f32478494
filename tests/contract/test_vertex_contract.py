"""The behaviours of Vertex AI the operators rely on, held against the emulator (by default, in the
normal test run) or against real Vertex AI, so that the emulator's assumptions can be checked.

Against Google (cheap: bad requests that cost nothing, and two CPU-only n1-standard-4 jobs that
run ``python -c pass`` / are cancelled, a few cents in all)::

    gcloud auth application-default login      # or GOOGLE_APPLICATION_CREDENTIALS=key.json
    VERTEX_CONTRACT_PROJECT=my-project VERTEX_CONTRACT_LOCATION=us-central1 \\
        .venv/bin/python -m pytest tests/contract -v
    # -> contract-report.json (or $VERTEX_CONTRACT_REPORT): what Google answered, to share

The caller needs ``roles/aiplatform.user`` on the project. ``VERTEX_CONTRACT_IMAGE`` overrides the
job image (default ``python:3.11-slim`` from Docker Hub, which custom training accepts: "push it to
Artifact Registry or Docker Hub", docs/training/containers-overview). See docs/contract.md.

Every raw answer is also checked against Google's proto types (tests/google_types.py), so a run
against Google tests that checker too.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB
from airflow_gpu_sched.vertex.client import NotFoundError
from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp
from airflow_gpu_sched.vertex.rules import SpecError
from tests.contract.conftest import AGAINST_GOOGLE, Target
from tests.google_types import exchange_violations, format_violations

S = JobState
# Against Google a job takes minutes to run; the suite-wide 300 s timeout is for the emulator.
pytestmark = pytest.mark.timeout(3600 if AGAINST_GOOGLE else 300)
# The emulator's refusal of these lands with the branches poller (filters) and strict (bodies).
LIFE_CYCLE = [S.JOB_STATE_QUEUED, S.JOB_STATE_PENDING, S.JOB_STATE_RUNNING, S.JOB_STATE_SUCCEEDED]


def cpu_job(target: Target, check: str, command: list[str], listed: bool = True, **env: str) -> dict:
    """A CPU-only job: no GPU quota, no accelerator capacity, about a cent per run. ``listed``:
    carries this run's label (bodies meant to be refused do not, should a target accept them)."""
    container: dict[str, Any] = {"imageUri": target.image, "command": command}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"displayName": f"contract-{check}-{target.run_id}",
            "labels": {"contract-run" if listed else "contract-refused": target.run_id, "contract-check": check},
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                                             "replicaCount": "1", "containerSpec": container}]}}


def raw(target: Target, observe: dict, rpc: str, method: str, path: str, *, body: dict | None = None,
        params: dict | None = None) -> tuple[int, dict]:
    """One request as is. What came back goes to the report first; then it must parse into
    Google's types, whoever answered."""
    response = target.http(method, path, json=body, params=params)
    answer = response.json()
    if response.status_code < 300 and rpc.endswith(".create"):
        target.created.append(answer["name"])  # refused by the contract, but made: cancelled at the end
    error = answer.get("error", {}) if isinstance(answer, dict) else {}
    observe.update({"http": response.status_code, "status": error.get("status"), "message": error.get("message"),
                    "details": error.get("details", [])})
    exchange = {"rpc": rpc, "method": method, "path": path, "query": list((params or {}).items()),
                "requestBody": None if body is None else json.dumps(body), "status": response.status_code,
                "responseBody": response.text or None}
    violations = [v for v in exchange_violations(exchange) if v.part != "request"]  # bad on purpose
    observe["wireViolations"] = [str(v) for v in violations]
    assert violations == [], format_violations(violations)
    return response.status_code, answer


def watch(target: Target, cancel_when: dict[str, S | None]) -> dict[str, tuple[Any, list[dict]]]:
    """Poll jobs together until each ends: {name: (last job, every state change seen, with seconds
    since the watch began)}. ``cancel_when[name]``: cancel that job once it shows this state."""
    seen: dict[str, list[dict]] = {name: [] for name in cancel_when}
    ended: dict[str, Any] = {}
    started = time.monotonic()
    with target.client() as client:
        while len(ended) < len(seen):
            for name in set(seen) - set(ended):
                job = client.get_custom_job(name)
                elapsed = round(time.monotonic() - started, 2)
                states = [s for s in seen[name] if "state" in s]
                if not states or states[-1]["state"] != job.state.value:
                    seen[name].append({"state": job.state.value, "seenAfterSeconds": elapsed})
                if job.is_terminal():
                    ended[name] = job
                elif cancel_when[name] is job.state:
                    client.cancel_custom_job(name)
                    seen[name].append({"cancelRequestedAfterSeconds": elapsed})
                    cancel_when[name] = None
                assert elapsed < target.wait_seconds, f"{name} still {job.state.value} after {elapsed}s: {seen[name]}"
            time.sleep(target.poll_interval)
    return {name: (ended[name], seen[name]) for name in seen}


def states_of(seen: list[dict]) -> list[S]:
    return [S(s["state"]) for s in seen if "state" in s]


def times_of(job) -> dict:
    return {k: format_timestamp(getattr(job, k)) if getattr(job, k) else None
            for k in ("create_time", "start_time", "end_time", "update_time")}


# ------------------------------------------------------------------ bad requests (free)


def test_an_unknown_field_in_a_body_is_a_400_invalid_argument_naming_it(target, observe):
    body = {**cpu_job(target, "unknown-field", ["python", "-c", "pass"], listed=False), "maxWaitDuration": "60s"}
    status, answer = raw(target, observe, "customJobs.create", "POST", f"{target.parent}/customJobs", body=body)
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert "maxWaitDuration" in answer["error"]["message"]  # Google: Unknown name "maxWaitDuration" at 'custom_job'


def test_a_list_filter_on_update_time_is_a_400_invalid_argument(target, observe):
    status, answer = raw(target, observe, "customJobs.list", "GET", f"{target.parent}/customJobs",
                         params={"filter": 'update_time>="2026-01-01T00:00:00Z"'})
    assert (status, answer.get("error", {}).get("status")) == (400, "INVALID_ARGUMENT")


def test_an_accelerator_without_its_count_is_a_400_naming_the_field(target, observe):
    body = cpu_job(target, "no-count", ["python", "-c", "pass"], listed=False)
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_T4"
    status, answer = raw(target, observe, "customJobs.create", "POST", f"{target.parent}/customJobs", body=body)
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    said = answer["error"]["message"].lower().replace("_", "")  # accelerator_count or acceleratorCount
    assert "acceleratorcount" in said


def test_a_missing_persistent_resource_is_a_404_not_found(target, observe):
    missing = f"{target.parent}/persistentResources/contract-missing-{target.run_id}"
    status, answer = raw(target, observe, "persistentResources.get", "GET", missing)
    assert (status, answer["error"]["status"], answer["error"]["code"]) == (404, "NOT_FOUND", 404)
    with target.client() as client, pytest.raises(NotFoundError):  # what the operator catches
        client.get_persistent_resource(missing)


def test_our_client_refuses_before_sending_what_the_service_would_refuse(target):
    body = cpu_job(target, "client-side", ["python", "-c", "pass"], listed=False)
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_T4"
    with target.client() as client, pytest.raises(SpecError, match="acceleratorCount"):
        client.create_custom_job(body)  # the same rule, named the same way, with nothing sent


# ------------------------------------------------------------------ a CPU-only job's life


@pytest.fixture(scope="module")
def lives(target) -> dict[str, tuple[Any, list[dict]]]:
    """Two CPU jobs at once: one runs ``python -c pass``, one sleeps and is cancelled once RUNNING."""
    # the emulator does not run the command: its EMULATOR_RUN_SECONDS stands for the sleep
    sleeper = cpu_job(target, "cancel", ["python", "-c", "import time; time.sleep(900)"],
                      **({} if AGAINST_GOOGLE else {"EMULATOR_RUN_SECONDS": "100000"}))
    with target.client() as client:
        done = client.create_custom_job(cpu_job(target, "life-cycle", ["python", "-c", "pass"]))
        target.created.append(done.name)
        stopped = client.create_custom_job(sleeper)
        target.created.append(stopped.name)
    watched = watch(target, {done.name: None, stopped.name: S.JOB_STATE_RUNNING})
    return {"succeeded": watched[done.name], "cancelled": watched[stopped.name]}


@pytest.fixture
def succeeded(lives):
    return lives["succeeded"]


@pytest.fixture
def cancelled(lives):
    return lives["cancelled"]


def test_a_cpu_job_goes_queued_pending_running_succeeded_with_its_times_set(succeeded, observe):
    job, seen = succeeded
    observe.update({"statesSeen": seen, "times": times_of(job), "error": job.error and job.error.model_dump()})
    states = states_of(seen)
    assert states[-1] is S.JOB_STATE_SUCCEEDED and set(states) <= set(LIFE_CYCLE), seen
    assert [LIFE_CYCLE.index(s) for s in states] == sorted(LIFE_CYCLE.index(s) for s in states), seen  # no way back
    assert job.create_time <= job.start_time <= job.end_time, times_of(job)
    assert job.error is None


def test_a_cancelled_job_goes_cancelling_then_cancelled_with_error_code_1(cancelled, observe):
    job, seen = cancelled
    observe.update({"statesSeen": seen, "times": times_of(job), "error": job.error and job.error.model_dump()})
    after_cancel = states_of(seen[next(i for i, s in enumerate(seen) if "cancelRequestedAfterSeconds" in s):])
    order = [S.JOB_STATE_RUNNING, S.JOB_STATE_CANCELLING, S.JOB_STATE_CANCELLED]
    assert after_cancel[-1] is S.JOB_STATE_CANCELLED and set(after_cancel) <= set(order), seen
    assert [order.index(s) for s in after_cancel] == sorted(order.index(s) for s in after_cancel), seen
    assert job.error is not None and job.error.code == 1  # google.rpc.Code CANCELLED
    assert job.end_time is not None and job.start_time is not None


def test_the_list_filters_the_poller_uses(target, succeeded, cancelled, observe):
    done, stopped = succeeded[0], cancelled[0]
    ours = f'labels.contract-run="{target.run_id}"'  # a dashed label key, as the poller's managed-by
    earliest = min(done.create_time, stopped.create_time) - timedelta(seconds=1)
    latest = max(done.create_time, stopped.create_time) + timedelta(seconds=1)
    cases = {
        ours: {done.name, stopped.name},
        f'{ours} AND state="JOB_STATE_SUCCEEDED"': {done.name},
        f'{ours} AND state!="JOB_STATE_SUCCEEDED"': {stopped.name},
        f"{ours} AND {CUSTOM_JOB.not_terminal_filter()}": set(),  # the poller's "still active"
        f'{ours} AND NOT (state="JOB_STATE_SUCCEEDED" OR state="JOB_STATE_FAILED")': {stopped.name},
        f'{ours} AND create_time>="{format_timestamp(earliest)}"': {done.name, stopped.name},
        f'{ours} AND create_time>"{format_timestamp(latest)}"': set(),
    }
    found = {}
    with target.client() as client:
        for text in cases:
            found[text] = {job.name for job in client.list_custom_jobs(filter=text, page_size=50)}
    observe.update({"filters": {text: sorted(n.rsplit("/", 1)[-1] for n in names) for text, names in found.items()}})
    assert found == cases


# ------------------------------------------------------------------ when Google ends a wait by cancelling
# Two questions the legacy AI Platform answers with "cancels it" (GoogleCloudMlV1__Scheduling
# maxWaitTime / maxRunningTime) and Vertex's docs leave open (docs/fidelity.md, variants
# flexStartExpiry and timeoutOutcome). Whatever Google answers, the operator must decide the
# same way: these checks record the answer and hold our classifier to it.

FLEX_ENV = "VERTEX_CONTRACT_FLEX_START"  # against Google: opt in (it needs preemptible A100 quota)


def _watch_observed(target: Target, name: str) -> tuple[Any, dict, list[dict]]:
    """Poll one job to its end: (last job, what state_times made of the polls, states seen)."""
    from airflow_gpu_sched.orchestration import state_times

    times, seen, started = state_times.new(), [], time.monotonic()
    with target.client() as client:
        while True:
            job = client.get_custom_job(name)
            state_times.note(times, job, time.time())
            if not seen or seen[-1]["state"] != job.state.value:
                seen.append({"state": job.state.value, "seenAfterSeconds": round(time.monotonic() - started, 2)})
            if job.is_terminal():
                return job, times, seen
            assert time.monotonic() - started < target.wait_seconds, f"{name} still {job.state.value}: {seen}"
            time.sleep(target.poll_interval)


def test_a_job_past_its_scheduling_timeout(target, observe):
    """A CPU job that sleeps past ``scheduling.timeout: 60s``: FAILED or CANCELLED? Either way the
    operator reports a timeout (TrainingJobTimedOut), never "cancelled outside this task".
    Cost against Google: one n1-standard-4 for about a minute plus provisioning (about a cent)."""
    from airflow_gpu_sched.orchestration.outcomes import Event, event_kind, timed_out

    body = cpu_job(target, "timeout", ["python", "-c", "import time; time.sleep(900)"],
                   **({} if AGAINST_GOOGLE else {"EMULATOR_RUN_SECONDS": "100000"}))
    body["jobSpec"]["scheduling"] = {"timeout": "60s"}
    with target.client() as client:
        job = client.create_custom_job(body)
        target.created.append(job.name)
    job, times, seen = _watch_observed(target, job.name)
    observe.update({"statesSeen": seen, "times": times_of(job), "error": job.error and job.error.model_dump()})
    assert S.JOB_STATE_RUNNING in states_of(seen), seen  # a minute of RUNNING: a poll sees it
    assert job.state in (S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED), seen
    assert event_kind(job, times) is Event.FAILED and timed_out(job, times), (job.error, times)


def test_a_flex_start_job_that_waits_past_its_max_wait_duration(target, observe):
    """A FLEX_START job with ``maxWaitDuration: 60s`` that gets no capacity: FAILED, EXPIRED or
    CANCELLED? Whichever, never seen RUNNING, it is a capacity timeout (the plan moves on).
    Cost against Google: nothing while it waits; if it does get an A100 it runs ``python -c
    pass`` (a minute of one GPU) and the check says it was inconclusive. Opt in with
    VERTEX_CONTRACT_FLEX_START=1 (needs preemptible A100 quota in the region)."""
    import os

    from airflow_gpu_sched.orchestration import state_times
    from airflow_gpu_sched.orchestration.outcomes import Event, event_kind

    if AGAINST_GOOGLE and not os.environ.get(FLEX_ENV):
        pytest.skip(f"needs preemptible A100 quota: set {FLEX_ENV}=1 to run it against Google")
    control = None
    if not AGAINST_GOOGLE:
        from airflow_gpu_sched.emulator.control import EmulatorControl

        control = EmulatorControl(target.api_endpoint)
        control.set_capacity(target.location, "NVIDIA_TESLA_A100", flex_start=0)  # no capacity: it waits
    body = cpu_job(target, "flex-wait", ["python", "-c", "pass"])
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    body["jobSpec"]["scheduling"] = {"strategy": "FLEX_START", "maxWaitDuration": "60s"}
    try:
        with target.client() as client:
            job = client.create_custom_job(body)
            target.created.append(job.name)
        job, times, seen = _watch_observed(target, job.name)
    finally:
        if control is not None:
            control.set_capacity(target.location, "NVIDIA_TESLA_A100", flex_start=64)
    observe.update({"statesSeen": seen, "times": times_of(job), "error": job.error and job.error.model_dump()})
    if state_times.seen_running(times):
        pytest.skip(f"inconclusive: the job got capacity and ran ({seen})")
    assert job.state in (S.JOB_STATE_FAILED, S.JOB_STATE_EXPIRED, S.JOB_STATE_CANCELLED), seen
    assert job.start_time is None or job.start_time >= job.create_time  # recorded: set at admission
    assert event_kind(job, times) is Event.CAPACITY_TIMEOUT, (job.state, job.error, times)
