"""Issue 40, one clock: every duration a user writes counts in the service's time, read from
each answer's ``Date`` header (vertex/service_clock.py). Against the emulator at ``--speed K``
a plan behaves as on Vertex, K times faster; a service whose ``Date`` is absent or garbled
leaves the wall clock. Through ``dag.test()`` against the emulator (a real HTTP server), the
header rewritten by a real proxy where a test needs another one."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, every_custom_job

from airflow_gpu_sched.vertex import service_clock
from airflow_gpu_sched.vertex.service_clock import ServiceClock, parse_date

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
SPEED = 120


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _operator(plan: list[dict], **kw: Any):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                               plan=plan, **{"poll_interval": 0.2, **A100, **kw})


def _flex_then_standard(dag_id: str, timeout: Any):
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        _operator([{"strategy": "FLEX_START", "max_wait_duration": "23h", "capacity_wait_timeout": timeout},
                   {"strategy": "STANDARD"}])
    return dag


def _waited(emulator) -> timedelta:
    """How long (in the emulator's time) the FLEX_START job waited before its cancel ended it."""
    (flex,) = [j for j in every_custom_job(emulator) if j["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"]
    assert flex["state"] == "JOB_STATE_CANCELLED"
    return _ts(flex["endTime"]) - _ts(flex["createTime"])


@pytest.fixture
def airflow(airflow_db, vertex_conn):
    return vertex_conn


@pytest.mark.timeout(240)  # today's main waited 20 real minutes here (the wall clock's bound)
def test_a_bound_in_minutes_ends_in_the_services_minutes_at_its_speed(airflow):
    """capacity_wait_timeout="20m" with a 23 h FLEX_START wait, the emulator at 120x: the job is
    cancelled about 20 emulated minutes after its create (10 real seconds), long before its 23 h
    wait, and the plan moves on to STANDARD."""
    airflow.reset({**FAST, "speed": SPEED})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    result = run_dag(_flex_then_standard("clock_at_speed", "20m"), logical_date=START)
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts] == [
        ("FLEX_START", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    waited = _waited(airflow)
    # the bound counted the service's minutes: at or past 20 of them, nowhere near the 23 h wait
    assert timedelta(minutes=20) <= waited < timedelta(hours=2), waited
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1, "STANDARD": 1}


def test_on_a_wall_clock_service_a_bound_counts_real_seconds(airflow):
    """The emulator at speed 1 (Vertex's pace): a 2-second bound ends the wait after 2 seconds,
    as before; the plan moves on."""
    airflow.reset({**FAST, "speed": 1, "runSeconds": 1, "provisioningSeconds": 1})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    result = run_dag(_flex_then_standard("clock_at_wall", 2), logical_date=START)
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts] == [
        ("FLEX_START", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert timedelta(seconds=2) <= _waited(airflow) < timedelta(hours=23)


class DateProxy:
    """A real HTTP proxy in front of the emulator that replaces every answer's ``Date`` with
    ``date`` (None: no Date at all), as a hostile or broken front end would."""

    def __init__(self, target: str, date: str | None):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = requests.request(self.command, target + self.path, data=body, headers=headers,
                                          timeout=30, allow_redirects=False)
                self.send_response_only(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in ("date", "content-length", "transfer-encoding", "connection",
                                           "content-encoding"):
                        self.send_header(key, value)
                if proxy.date is not None:
                    self.send_header("Date", proxy.date)
                self.send_header("Content-Length", str(len(answer.content)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_DELETE = do_PATCH = _forward

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self.date = date
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DateProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize("date", [None, "", "yesterday", "Sun, 06 Nov 1994 08:49:37 +0100",
                                  "Mon, 01 Jan 1900 00:00:00 GMT", "Thu, 01 Jan 2026 00:00:00 GMT",
                                  "x" * 500], ids=["absent", "empty", "garbled", "not-gmt", "year-1900",
                                                   "stuck", "oversize"])
@pytest.mark.timeout(120)  # a clock taken from a stuck Date never reaches the bound
def test_a_date_absent_or_not_to_trust_leaves_the_wall_clock(airflow, monkeypatch, date):
    """The emulator at 120x behind a proxy whose Date is absent, garbled or stuck: the bound
    counts the wall clock (2 real seconds: 240 emulated seconds at least), never the garbage."""
    import json

    airflow.reset({**FAST, "speed": SPEED})
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DateProxy(airflow.url, date) as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": proxy.url}}))
        result = run_dag(_flex_then_standard(f"clock_untrusted_{abs(hash(date)) % 10**6}", 2), logical_date=START)
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts] == [
        ("FLEX_START", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert not service_clock.CLOCK.heard_any  # nothing it said is the service's time now
    assert _waited(airflow) >= timedelta(seconds=2 * SPEED * 0.9)  # 2 wall seconds of a 120x service


# --- the clock itself (pure, local clocks injected)

class Ticks:
    def __init__(self) -> None:
        self.mono, self.wall = 100.0, 1_700_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall


def _clock() -> tuple[ServiceClock, Ticks]:
    ticks = Ticks()
    return ServiceClock(monotonic=ticks.monotonic, wall=ticks.time), ticks


def test_unheard_the_clock_is_the_wall_clock():
    clock, ticks = _clock()
    assert clock.now() == ticks.wall and clock.rate == 1.0 and clock.offset() == 0.0


def test_it_learns_the_services_rate_and_runs_on_at_it():
    clock, ticks = _clock()
    service = 1_800_000_000.0
    for _ in range(4):
        assert clock.heard(formatdate(service, usegmt=True))
        ticks.mono += 5
        service += 5 * SPEED
    assert clock.rate == pytest.approx(SPEED, rel=0.01)
    ticks.mono += 1  # a second after the last answer (5 s before), the service is 6 x 120 s on
    assert clock.now() == pytest.approx(service - 5 * SPEED + 6 * SPEED, abs=2)
    assert clock.real_seconds_until(clock.now() + 1200) == pytest.approx(10, abs=0.1)
    assert clock.real_seconds_until(clock.now() + 1200, cap=0.5) == 0.5


def test_a_wall_clock_service_is_rate_1_through_the_dates_1_second_resolution():
    clock, ticks = _clock()
    for step in range(8):
        clock.heard(formatdate(int(ticks.wall + step * 4.3), usegmt=True))  # truncated to the second
        ticks.mono += 4.3
    assert clock.rate == 1.0


def test_a_hand_moved_clock_is_one_odd_span_outvoted():
    clock, ticks = _clock()
    service = 1_800_000_000.0
    for jump in (0, 0, 0, 3600, 0):  # the emulator's clock:advance between two answers
        service += 5 + jump
        ticks.mono += 5
        clock.heard(formatdate(service, usegmt=True))
    assert clock.rate == 1.0


def test_a_date_that_stands_still_is_no_clock():
    clock, ticks = _clock()
    for _ in range(3):
        clock.heard("Thu, 01 Jan 2026 00:00:00 GMT")
        ticks.mono += 5
    assert not clock.heard_any and clock.now() == ticks.wall
    assert not clock.heard(formatdate(ticks.wall + 10, usegmt=True))  # until reset
    clock.reset()
    assert clock.heard(formatdate(ticks.wall + 10, usegmt=True))


def test_a_date_going_back_is_followed_and_measures_no_rate():
    clock, ticks = _clock()
    clock.heard(formatdate(1_800_000_000, usegmt=True))
    ticks.mono += 5
    clock.heard(formatdate(1_700_000_000, usegmt=True))  # another service (a reset emulator)
    assert clock.now() == 1_700_000_000 and clock.rate == 1.0


@pytest.mark.parametrize("value", [None, 17, b"Thu, 01 Jan 2026 00:00:00 GMT", "", "now", "x" * 65,
                                   "Thu, 01 Jan 2026 00:00:00 +0200", "Thu, 01 Jan 2026 00:00:00", "Thu Jan  1 00:00:00 2026",
                                   "Sat, 01 Jan 1994 00:00:00 GMT", "Thu, 01 Jan 2026 00:00:00 GMT\n",
                                   "Thu, 99 Jan 2026 00:00:00 GMT", "Thu, 01 Jan 2026 25:61:61 GMT"])
def test_a_date_not_to_trust_is_none(value):
    assert parse_date(value) is None


@pytest.mark.parametrize("value", ["Thu, 01 Jan 2026 00:00:00 GMT", "Thursday, 01-Jan-26 00:00:00 GMT"])
def test_the_http_date_forms_that_name_gmt_are_read(value):
    """IMF-fixdate (what Google sends) and RFC 850; the obsolete asctime form names no zone: not read."""
    assert parse_date(value) == datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()


def test_the_emulator_dates_every_answer_in_its_own_time(emulator):
    """One Date per answer, errors included, saying the emulated time (a jump of the clock too)."""
    emulator.advance(7200)
    for path in (f"/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", "/v1/not-a-method"):
        answer = requests.get(emulator.url + path, timeout=5)
        assert len(answer.raw.headers.getlist("date")) == 1
        said = parse_date(answer.headers["date"])
        assert said is not None and said >= datetime.now(timezone.utc).timestamp() + 7200 - 5


def test_every_recorded_answer_of_real_vertex_carries_a_date_the_clock_reads():
    """The fidelity row's evidence: each answer of the vendored real flights has a ``date`` in
    IMF-fixdate GMT, which :func:`parse_date` reads."""
    from tests.recorded import flight

    root = Path(__file__).parent / "data" / "recorded" / "cloud_custodian"
    calls = [call for name in sorted(p.name for p in root.iterdir() if p.is_dir()) for call in flight(name)]
    assert len(calls) == 90
    assert all(parse_date(call.headers["date"]) == call.date.timestamp() for call in calls)


@pytest.mark.timeout(120)
async def test_a_bound_in_trigger_kwargs_holds_in_a_new_process_at_the_services_speed(vertex_conn):
    """The bound is a service-time instant in the trigger's kwargs: rebuilt from them in a
    process that has heard nothing (a triggerer restart), the trigger cancels the job 10
    emulated minutes after its create at 120x (5 real seconds), long before its 23 h wait."""
    import importlib

    from airflow_gpu_sched.triggers import CustomJobTrigger
    from airflow_gpu_sched.vertex.client import VertexClient

    vertex_conn.reset({**FAST, "speed": SPEED})
    vertex_conn.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    body = {"displayName": "t", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
        "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/t:1"}}],
        "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "82800s"}}}
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=vertex_conn.url) as client:
        job = client.create_custom_job(body)
    running_by = job.create_time.timestamp() + 600
    path, kwargs = CustomJobTrigger(job.name, poll_interval=0.2, running_by=running_by,
                                    bound_reason="capacity_wait_timeout=10m").serialize()
    service_clock.reset()  # a new triggerer process
    module, _, cls = path.rpartition(".")
    trigger = getattr(importlib.import_module(module), cls)(**kwargs)
    async for event in trigger.run():
        payload = event.payload
        break
    assert payload["status"] == "capacity_timeout" and payload["running_bound"] == "capacity_wait_timeout=10m"
    (ended,) = [j for j in every_custom_job(vertex_conn) if j["name"] == job.name]
    assert ended["state"] == "JOB_STATE_CANCELLED"
    assert timedelta(minutes=10) <= _ts(ended["endTime"]) - _ts(ended["createTime"]) < timedelta(hours=2)
