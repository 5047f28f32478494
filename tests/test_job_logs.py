"""The job's Cloud Logging lines: the client against the emulator's entries:list (paging,
ordering, refusals), the shared tail (one call for many jobs), a restart that resumes from the
saved position, and the task log of a training under dag.test()."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import requests

from airflow_gpu_sched.orchestration.log_lines import LineBudget, LogPosition, advanced, fresh
from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers.log_tail import SharedLogTailer
from airflow_gpu_sched.vertex import cloud_logging
from airflow_gpu_sched.vertex.client import AsyncVertexClient, InvalidArgumentError, VertexClient
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT
from tests.google_types import traffic_violations
from tests.test_operator_dags import START, _spot
from tests.test_triggers import _create, _job


@pytest.fixture(autouse=True)
def _no_positions_from_other_tests():
    # each emulator reset numbers jobs from the same id: a position kept in this process for an
    # earlier test's job would otherwise apply to this test's job of the same name
    from airflow_gpu_sched.triggers import log_tail

    log_tail._IN_MEMORY.clear()


def _client(emulator) -> VertexClient:
    return VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)


def _ended_job(emulator, replicas: int = 1, run_seconds: int = 200, exit_code: int | None = None) -> str:
    body = _job(run_seconds=run_seconds, exit_code=exit_code)
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    if replicas > 1:
        body["jobSpec"]["workerPoolSpecs"].append({**pool, "replicaCount": str(replicas - 1)})
    name = _create(emulator, body)
    emulator.advance(run_seconds + 120)
    return name


def _entries_list(emulator, body: dict) -> requests.Response:
    return requests.post(f"{emulator.url}/v2/entries:list", json=body, timeout=5)


# ---------------------------------------------------------------------------- the wire


def test_entries_come_in_timestamp_order_across_pages(emulator):
    name = _ended_job(emulator, replicas=3)
    emulator.start_traffic()
    flt = cloud_logging.jobs_filter([cloud_logging.job_id_of(name)])
    with _client(emulator) as client:
        whole = client.list_log_entries_page(flt, page_size=1000).entries
        paged, token = [], None
        while True:
            page = client.list_log_entries_page(flt, page_size=2, page_token=token)
            assert len(page.entries) <= 2
            paged += page.entries
            if not (token := page.next_page_token):
                break
        newest_first = client.list_log_entries_page(flt, page_size=1000, order_by="timestamp desc").entries
    assert [e.key for e in paged] == [e.key for e in whole] == sorted(e.key for e in whole)
    assert [e.key for e in newest_first] == [e.key for e in reversed(whole)]
    assert {e.replica for e in whole} == {"workerpool0-0", "workerpool1-0", "workerpool1-1", "service"}
    states = [e for e in whole if e.job_state]  # the service's own entries on each state change
    assert [e.job_state for e in states][:1] == ["JOB_STATE_QUEUED"] and "JOB_STATE_RUNNING" in {
        e.job_state for e in states}
    assert states[0].log_name == f"projects/{PROJECT}/logs/ml.googleapis.com%2F{cloud_logging.job_id_of(name)}"
    assert "Waiting for job to be provisioned." in {e.message for e in states}
    first = next(e for e in whole if e.replica != "service").to_api()
    assert first["resource"] == {"type": "ml_job", "labels": {
        "job_id": cloud_logging.job_id_of(name), "project_id": PROJECT, "task_name": "workerpool0-0"}}
    assert {"logName", "timestamp", "receiveTimestamp", "insertId", "severity", "textPayload"} <= set(first)
    assert any(e.message.startswith("checkpoint saved at step") for e in whole)
    assert whole[-1].json_payload["message"] == "Job completed successfully."
    exchanges = [x for x in emulator.traffic() if x["rpc"] == "entries.list"]
    assert exchanges and traffic_violations(exchanges) == []  # Google's logging v2 protos, strictly


def test_the_filter_picks_jobs_replicas_severities_and_times(emulator):
    failed = _ended_job(emulator, replicas=2, exit_code=3)
    other = _ended_job(emulator)
    ids = [cloud_logging.job_id_of(n) for n in (failed, other)]
    with _client(emulator) as client:
        both = client.list_log_entries_page(cloud_logging.jobs_filter(ids), page_size=1000).entries
        errors = client.list_log_entries_page(cloud_logging.jobs_filter(ids, min_severity="ERROR"), page_size=1000).entries
        replica = client.list_log_entries_page(cloud_logging.jobs_filter(ids[:1], replica="workerpool1-0"),
                                               page_size=1000).entries
        later = client.list_log_entries_page(cloud_logging.jobs_filter(ids, since=both[3].timestamp), page_size=1000).entries
    assert {e.job_id for e in both} == set(ids)
    assert errors and all(e.severity == "ERROR" and e.job_id == ids[0] for e in errors)
    assert any("RuntimeError: training failed" in e.message for e in errors)
    assert replica and {e.replica for e in replica} == {"workerpool1-0"}
    assert [e.key for e in later] == [e.key for e in both if e.key >= both[3].key]
    legacy = _entries_list(emulator, {"resourceNames": [f"projects/{PROJECT}"], "filter": (
        f'resource.type="ml_job" labels."ml.googleapis.com/task_name"="workerpool1-0" '
        f'resource.labels.job_id="{ids[0]}"')}).json()
    assert {e["resource"]["labels"]["task_name"] for e in legacy["entries"]} == {"workerpool1-0"}


@pytest.mark.parametrize("body, said", [
    ({"filter": 'textPayload:"loss"'}, "does not support the field 'textPayload'"),
    ({"filter": 'resource.type="ml_job" AND'}, "Unparseable filter"),
    ({"filter": "NOT severity>=ERROR"}, "does not support NOT"),
    ({"filter": "x" * 20_001}, "longer than 20000 characters"),
    ({"pageSize": 1001}, "page_size must be between 0 and 1000"),
    ({"orderBy": "severity asc"}, 'only "timestamp asc" and "timestamp desc"'),
    ({"pageToken": "bm90IGEgdG9rZW4="}, "page_token is not a token this method returned"),
    ({"bogus": 1}, 'Unknown name "bogus": Cannot find field.'),
    ({"pageSize": "ten"}, "Invalid value at 'page_size' (TYPE_INT32)"),
], ids=["field", "syntax", "not", "too-long", "page-size", "order", "token", "unknown-field", "type"])
def test_refusals_in_googles_words(emulator, body, said):
    response = _entries_list(emulator, {"resourceNames": [f"projects/{PROJECT}"], **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and said in error["message"]


def test_the_client_raises_a_refused_filter_as_invalid_argument(emulator):
    with _client(emulator) as client, pytest.raises(InvalidArgumentError, match="Unparseable filter"):
        client.list_log_entries_page('resource.labels.job_id=("1" OR', page_size=10)


def test_a_resource_name_is_required(emulator):
    response = _entries_list(emulator, {"filter": ""})
    assert response.status_code == 400 and "resource_names is required" in response.text


def test_batches_keep_each_filter_within_the_limit():
    ids = [str(10**18 + i) for i in range(1500)]
    since = "2026-01-01T00:00:00.000000Z"
    batches = cloud_logging.batches(ids, since)
    assert [i for b in batches for i in b] == ids and len(batches) == 2  # ~790 ids of 19 digits a call
    sizes = [len(cloud_logging.jobs_filter(b, since)) for b in batches]
    assert max(sizes) <= cloud_logging.FILTER_LIMIT < sizes[0] + 30  # full, yet within
    assert cloud_logging.batches(["1", "2", "3"], since, limit=len(cloud_logging.jobs_filter(["1", "2"], since))) \
        == [["1", "2"], ["3"]]


# ---------------------------------------------------------------------------- the pure part


def _entry(ts: str, insert_id: str, text: str = "x") -> cloud_logging.LogEntry:
    return cloud_logging.LogEntry.model_validate({"timestamp": ts, "insertId": insert_id, "textPayload": text})


def test_fresh_drops_what_the_position_covers_and_duplicates():
    a, b, c = _entry("2026-01-01T00:00:01Z", "a"), _entry("2026-01-01T00:00:01.000000000Z", "b"), \
        _entry("2026-01-01T00:00:01.5Z", "a")
    position = advanced(LogPosition(), [a])
    assert fresh([c, b, a, b], position) == [b, c]
    assert fresh([a, b, c], LogPosition()) == [a, b, c]


def test_the_budget_skips_over_the_cap_and_says_how_many():
    budget = LineBudget(per_minute=2)
    admitted = [budget.admit(t)[0] for t in (0.0, 1.0, 2.0, 3.0)]
    assert admitted == [True, True, False, False]
    ok, note = budget.admit(61.0)
    assert ok and note and "skipped 2 job log line(s) over log_lines_per_minute=2" in note
    assert LineBudget(None).admit(0.0) == (True, None)


# ---------------------------------------------------------------------------- the shared tail


async def test_one_entries_list_call_tails_many_jobs(fast_emulator):
    names = [_create(fast_emulator, _job(run_seconds=300)) for _ in range(5)]
    fast_emulator.advance(120)
    fast_emulator.start_traffic()
    tailer = SharedLogTailer(("google_cloud_default", None, PROJECT), lambda: _async_client(fast_emulator))
    tails = [tailer.watch(cloud_logging.job_id_of(n), 30.0, LogPosition()) for n in names]
    tailer._task.cancel()  # drive the polls by hand
    await tailer.poll_once()
    calls = [x for x in fast_emulator.traffic() if x["rpc"] == "entries.list"]
    assert len(calls) == tailer.calls == 1
    sent = json.loads(calls[0]["requestBody"])["filter"]
    assert all(f'"{cloud_logging.job_id_of(n)}"' in sent for n in names) and " OR " in sent
    for tail, name in zip(tails, names):
        got = await asyncio.wait_for(tail.next(), 5)
        assert got and {e.job_id for e in got} == {cloud_logging.job_id_of(name)}


async def _async_client(emulator) -> AsyncVertexClient:
    return AsyncVertexClient(LOCATION, project=PROJECT, api_endpoint=emulator.url)


# ---------------------------------------------------------------------------- the trigger


class _Lines:
    """The trigger's log lines as written (Airflow's LoggingMixin keeps its logger in ``_log``)."""

    def __init__(self, trigger):
        self.lines: list[str] = []
        trigger._log = self

    def info(self, msg, *args):
        self.lines.append(msg % args if args else msg)

    warning = error = debug = info


async def test_a_restarted_trigger_resumes_after_the_last_line_written(fast_emulator):
    fast_emulator.reset({**FAST, "runSeconds": 600})
    name = _create(fast_emulator, _job(run_seconds=600))
    first = CustomJobTrigger(name, poll_interval=0.05, stream_logs=True)
    before = _Lines(first)
    run = asyncio.ensure_future(_drain(first))
    while not any("checkpoint saved at step 300" in line for line in before.lines):
        await asyncio.sleep(0.05)
    run.cancel()  # the triggerer went away mid-stream
    with pytest.raises(asyncio.CancelledError):
        await run
    path, kwargs = first.serialize()
    second = CustomJobTrigger(**kwargs)  # what the next triggerer builds from the trigger row
    after = _Lines(second)
    event = await asyncio.wait_for(_drain(second), 60)
    assert event["status"] == "succeeded"
    written = [line for line in before.lines + after.lines if line.startswith("[")]
    with _client(fast_emulator) as client:
        every = client.list_log_entries_page(cloud_logging.jobs_filter([cloud_logging.job_id_of(name)]),
                                             page_size=1000).entries
    expected = [f"[{e.replica} {e.severity}] {e.message}" for e in every]
    assert written == expected  # none repeated, none dropped, in order
    assert any(line.startswith("job log: going on after") for line in after.lines)


async def _drain(trigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


async def test_the_cap_says_how_many_lines_it_skipped(fast_emulator):
    name = _create(fast_emulator, _job(run_seconds=400))
    trigger = CustomJobTrigger(name, poll_interval=0.05, stream_logs=True, log_lines_per_minute=3)
    lines = _Lines(trigger)
    await asyncio.wait_for(_drain(trigger), 60)
    shown = [line for line in lines.lines if line.startswith("[")]
    notes = [line for line in lines.lines if "skipped" in line]
    assert len(shown) == 3 and len(notes) == 1
    skipped = int(re.search(r"skipped (\d+) job log line", notes[0]).group(1))
    with _client(fast_emulator) as client:
        total = len(client.list_log_entries_page(cloud_logging.jobs_filter([cloud_logging.job_id_of(name)]),
                                                 page_size=1000).entries)
    assert skipped == total - 3


# ---------------------------------------------------------------------------- in Airflow


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    fast_emulator.reset({**FAST, "runSeconds": 150})
    return fast_emulator


@pytest.mark.parametrize("deferrable", [True, False], ids=["in-the-triggerer", "in-the-worker"])
def test_the_task_log_shows_the_jobs_lines_with_replica_and_severity(airflow, capfd, deferrable):
    from airflow.sdk import DAG

    with DAG("job_logs", schedule=None, start_date=START) as dag:
        _spot(deferrable=deferrable)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    out = capfd.readouterr().out  # the task log, on stdout under dag.test
    assert "[workerpool0-0 INFO] starting training (run 1)" in out
    assert "[workerpool0-0 INFO] checkpoint saved at step 200" in out
    assert "[service INFO] Job completed successfully." in out
    assert "[service INFO] Waiting for job to be provisioned." in out
    # Vertex's own entry made the first RUNNING exact (no poll's bound)
    times = result["train"].return_value["attempts"][0]["times"]
    assert times["exact"] is True and times["source"] == "log" and times["bound_seconds"] == 0


def test_stream_logs_false_writes_no_job_lines(airflow, capfd):
    from airflow.sdk import DAG

    with DAG("job_logs_off", schedule=None, start_date=START) as dag:
        _spot(deferrable=True, stream_logs=False)

    assert run_dag(dag, logical_date=START).state == "success"
    assert "[workerpool0-0 INFO]" not in capfd.readouterr().out


def test_a_failed_jobs_error_carries_its_failing_replicas_last_lines(airflow, capfd):
    from airflow.sdk import DAG

    with DAG("job_logs_failed", schedule=None, start_date=START) as dag:
        _spot(env={"EMULATOR_EXIT_CODE": "1"}, failure_log_lines=4)

    result = run_dag(dag, logical_date=START)
    assert result.state == "failed"
    out = capfd.readouterr().out
    error = next(line for line in out.splitlines() if "TrainingJobFailedNoRetry" in line or
                 "the training job failed" in line)
    assert error
    assert "last 4 log line(s) of workerpool0-0:" in out
    assert "[workerpool0-0 ERROR] RuntimeError: training failed" in out
