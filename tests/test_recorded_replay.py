"""Our clients and decisions against recorded real Vertex AI traffic (tests/data/recorded/).

Each of the six recorded jobs (cloud-custodian's flights: create, list, get, cancel, delete of a
custom job or tuning job on real Vertex AI, 2026-07-08) is replayed by a real HTTP server
(:class:`tests.recorded.ReplayServer`), call by call, to the sync and the async client. Then:

- every recorded answer parses, and parses *whole*: the typed model written back is the
  recorded body (no field dropped, none changed but the spelling of a timestamp), and the
  body conforms to the discovery document's schema;
- the errors are typed as Google's status says (404 -> NotFoundError, its message kept);
- the decisions classify each recorded job as what it was: waiting, then cancelled, never run.
  None of these jobs was ever RUNNING, though every read after the create has a ``startTime``
  (set at admission): "got capacity" is decided from the observed states
  (``orchestration/state_times.py``, issue 21 item 1), never from ``startTime``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from tests.conformance import conformance_errors
from tests.recorded import CUSTOM_CREATE, FLIGHTS, TUNING_CREATE, Call, ReplayServer, flight

from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB, HYPERPARAMETER_TUNING_JOB
from airflow_gpu_sched.orchestration.outcomes import Event, event_for_job, event_kind
from airflow_gpu_sched.orchestration.watch import JobWatch
from airflow_gpu_sched.vertex.client import AsyncVertexClient, NotFoundError, VertexClient, aclose_shared_clients
from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import Operation

PROJECT, LOCATION = "cloud-custodian", "us-central1"
WAITING = {JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_PENDING}
SCHEMA = {"customJobs": "GoogleCloudAiplatformV1CustomJob",
          "hyperparameterTuningJobs": "GoogleCloudAiplatformV1HyperparameterTuningJob"}
LIST_SCHEMA = {"customJobs": "GoogleCloudAiplatformV1ListCustomJobsResponse",
               "hyperparameterTuningJobs": "GoogleCloudAiplatformV1ListHyperparameterTuningJobsResponse"}
NOT_FOUND = {"customJobs": "The CustomJob does not exist.",
             "hyperparameterTuningJobs": "The HyperparameterTuningJob does not exist."}


def _job_type(calls: list[Call]):
    return HYPERPARAMETER_TUNING_JOB if calls[0].collection == "hyperparameterTuningJobs" else CUSTOM_JOB


def _request(client, call: Call, name: str | None):
    """The client call that makes ``call``'s request (a coroutine for the async client)."""
    key = _job_type([call]).key
    if call.kind == "create":
        body = TUNING_CREATE if key != "custom_job" else CUSTOM_CREATE
        return getattr(client, f"create_{key}")(body)
    if call.kind == "list":
        return getattr(client, f"list_{key}s_page")()
    return getattr(client, f"{call.kind}_{key}")(name)


def replay_sync(name: str) -> tuple[ReplayServer, list[tuple[Call, object]]]:
    """Every call of the flight through :class:`VertexClient`: (recorded call, what the client
    returned or raised), in the recorded order."""
    results = []
    with ReplayServer(name) as server, VertexClient(LOCATION, project=PROJECT, api_endpoint=server.url) as client:
        job = None
        for call in server.calls:
            try:
                outcome = _request(client, call, job)
            except Exception as exc:  # noqa: BLE001 - recorded errors are outcomes here
                outcome = exc
            if call.kind == "create":
                job = outcome.name
            results.append((call, outcome))
    return server, results


def replay_async(name: str) -> tuple[ReplayServer, list[tuple[Call, object]]]:
    async def run():
        results = []
        client = AsyncVertexClient(LOCATION, project=PROJECT, api_endpoint=server.url)
        try:
            job = None
            for call in server.calls:
                try:
                    outcome = await _request(client, call, job)
                except Exception as exc:  # noqa: BLE001
                    outcome = exc
                if call.kind == "create":
                    job = outcome.name
                results.append((call, outcome))
        finally:
            await aclose_shared_clients()
        return results

    with ReplayServer(name) as server:
        return server, asyncio.run(run())


REPLAYS = {"sync": replay_sync, "async": replay_async}


def _instants_equal(recorded, ours) -> bool:
    """Field by field; timestamps compared as instants (Google writes '...36Z' and '...36.654698Z')."""
    if isinstance(recorded, dict) and isinstance(ours, dict):
        return recorded.keys() == ours.keys() and all(_instants_equal(recorded[k], ours[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(ours, list):
        return len(recorded) == len(ours) and all(_instants_equal(a, b) for a, b in zip(recorded, ours))
    if isinstance(recorded, str) and isinstance(ours, str) and recorded.endswith("Z") and "T" in recorded:
        try:
            return datetime.fromisoformat(recorded.replace("Z", "+00:00")) == \
                datetime.fromisoformat(ours.replace("Z", "+00:00"))
        except ValueError:
            pass
    return recorded == ours


def test_the_recordings_are_the_vendored_six_jobs():
    calls = [c for name in FLIGHTS for c in flight(name)]
    assert len(calls) == 44
    assert {c.headers["server"] for c in calls} == {"ESF"}
    assert {c.status for c in calls} == {200, 404}
    # every job read after its create has a startTime, though none was ever RUNNING
    reads = [j for c in calls if c.kind in ("get", "list") for j in c.jobs()]
    assert reads and all("startTime" in j for j in reads)
    assert {j["state"] for c in calls for j in c.jobs()} == {"JOB_STATE_PENDING", "JOB_STATE_QUEUED",
                                                             "JOB_STATE_CANCELLED"}


@pytest.mark.parametrize("face", list(REPLAYS))
@pytest.mark.parametrize("name", FLIGHTS)
def test_the_client_parses_every_recorded_answer_whole(name, face):
    server, results = REPLAYS[face](name)
    assert server.misses == [], "the client sent a request the recording does not have"
    assert server.unserved() == [], "the client skipped (or retried into) a recorded call"
    assert [c.path.name for c in server.served] == [c.path.name for c, _ in results]
    for call, outcome in results:
        where = call.path.name
        if call.status == 404:
            assert isinstance(outcome, NotFoundError), where
            assert (outcome.status_code, outcome.rpc_status) == (404, "NOT_FOUND"), where
            assert outcome.message == NOT_FOUND[call.collection] and outcome.details == [], where
            continue
        assert not isinstance(outcome, Exception), f"{where}: {outcome!r}"
        if call.kind == "cancel":
            assert call.body == {} and outcome is None
        elif call.kind == "delete":
            assert isinstance(outcome, Operation) and outcome.done, where
            assert conformance_errors(call.body, "GoogleLongrunningOperation") == [], where
            assert _instants_equal(call.body, outcome.to_api()), where
        elif call.kind == "list":
            assert conformance_errors(call.body, LIST_SCHEMA[call.collection]) == [], where
            assert _instants_equal(call.body, outcome.to_api()), f"{where}: {outcome.to_api()}"
        else:
            assert conformance_errors(call.body, SCHEMA[call.collection]) == [], where
            assert _instants_equal(call.body, outcome.to_api()), f"{where}: {outcome.to_api()}"


def _observations(name: str) -> list:
    """Each job answer of the flight (create, list item, get) as the decisions see it (the job
    type's CustomJob view), in the recorded order."""
    calls = flight(name)
    job_type = _job_type(calls)
    return [job_type.view(job_type.parse(body)) for call in calls for body in call.jobs()]


@pytest.mark.parametrize("name", FLIGHTS)
def test_each_recorded_job_is_waiting_then_cancelled(name):
    seen = _observations(name)
    assert seen[0].state is JobState.JOB_STATE_PENDING and seen[0].start_time is None  # the create answer
    assert seen[-1].state is JobState.JOB_STATE_CANCELLED
    for job in seen:
        if job.state in WAITING:
            assert event_kind(job) is None
        else:
            assert job.state is JobState.JOB_STATE_CANCELLED
            assert event_kind(job) is Event.CANCELLED
            event = event_for_job(job)
            assert event["status"] == "cancelled" and event["message"] == "CANCELED"
            assert job.error.code == 1 and job.end_time is not None


@pytest.mark.parametrize("name", FLIGHTS)
def test_the_waiting_states_back_and_forth_are_not_restarts(name):
    """PENDING -> QUEUED -> PENDING -> CANCELLED (recorded): no RUNNING, so no SPOT restart."""
    watch = JobWatch(name)
    lines = [line for job in _observations(name) if (line := watch.observe(job))]
    assert watch.observed_restarts == 0
    assert not any("preempted" in line for line in lines)
    assert lines[-1].endswith("JOB_STATE_CANCELLED") or "JOB_STATE_CANCELLED after" in lines[-1]


def test_a_recorded_job_goes_back_from_queued_to_pending():
    states = [job.state.value for job in _observations("vertexai_hp_tuning_job_query")]
    assert states[:3] == ["JOB_STATE_PENDING", "JOB_STATE_QUEUED", "JOB_STATE_PENDING"]


@pytest.mark.parametrize("name", FLIGHTS)
def test_a_recorded_job_with_a_start_time_that_never_ran_did_not_get_capacity(name):
    """Every read has a startTime, none was RUNNING: never "ran", the bound before RUNNING
    applies while it waits, no run time and no GPU-hours."""
    from airflow_gpu_sched.orchestration import state_times

    times = state_times.new()
    for polled_at, job in enumerate(_observations(name)):
        state_times.note(times, job, float(polled_at))
        assert not state_times.has_run(job, times), job.state
        if job.state in WAITING:
            assert state_times.past_running_bound(job, times, running_by=0.0, now=1.0)
    assert state_times.running_span(job, times) is None
