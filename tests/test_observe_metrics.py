"""Metrics on the wire: Airflow's own StatsD client ([metrics] statsd_on) sends to a UDP socket
bound on loopback in the test; a plan with a fallback, a preemption and prices runs through
``dag.test()`` against the emulator, and the packets are read back, tagged and plain."""

from __future__ import annotations

import re
import socket
from datetime import datetime, timezone

import pytest

from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 2.0, "SPOT": 1.0, "STANDARD": 3.0}}
PACKET = re.compile(r"^(?P<name>[^:]+):(?P<value>[-0-9.e]+)\|(?P<type>c|ms|g)$")


class StatsdSocket:
    """A UDP socket on loopback that Airflow's StatsD logger sends to; ``packets()`` reads them."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]

    def packets(self) -> list[tuple[str, dict[str, str], float, str]]:
        """(name, tags, value, type) for every line received so far (influx tags split off the name)."""
        found = []
        while True:
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, socket.timeout):
                return found
            for line in data.decode().splitlines():
                match = PACKET.match(line)
                assert match, f"not a StatsD line: {line!r}"
                name, *pairs = match["name"].split(",")
                found.append((name, dict(p.split("=", 1) for p in pairs), float(match["value"]), match["type"]))


@pytest.fixture(params=["influxdb-tags", "plain"])
def statsd(request, monkeypatch, airflow_db):
    """Airflow's stats configured as a deployment would ([metrics] via env), then initialised as
    the task runner does (``stats.initialize`` in ``task_runner.main``); back to none afterwards."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    server = StatsdSocket()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(server.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", str(request.param == "influxdb-tags"))
    stats.initialize(factory=get_stats_factory(), export_legacy_names=True)
    server.tagged = request.param == "influxdb-tags"
    yield server
    stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
    server.sock.close()


def _fallback_plan_dag(dag_id: str):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        GpuTrainingOperator(
            task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
            poll_interval=0.02, prices=PRICES, plan=[
                {"strategy": "FLEX_START", "max_wait_duration": "60s"},
                {"strategy": "SPOT", "max_preemption_retries": 0},
                {"strategy": "STANDARD"}])
    return dag


def test_metrics_reach_statsd_tagged_and_as_distinct_plain_series(statsd, fast_emulator):
    from tests.conftest import FAST

    fast_emulator.reset({**FAST, "spotPreemptionsPerHour": 36000})
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    dag_id = f"metrics_{'tagged' if statsd.tagged else 'plain'}"
    result = run_dag(_fallback_plan_dag(dag_id), logical_date=START)
    training = result["train"].return_value
    assert result.state == "success" and [a["strategy"] for a in training["attempts"]] == [
        "FLEX_START", "SPOT", "STANDARD"]
    packets = [p for p in statsd.packets() if p[0].startswith("airflow.gpu_sched.")]
    by_name: dict[str, list] = {}
    for name, tags, value, kind in packets:
        by_name.setdefault(name, []).append((tags, value, kind))

    # the modern names: one series each, the variables in tags (dropped by plain StatsD)
    waits = by_name["airflow.gpu_sched.capacity_wait"]
    assert [k for _, _, k in waits] == ["ms"] * 3
    assert [v for _, v, _ in waits] == [pytest.approx(a["queued_seconds"] * 1000, abs=1) for a in training["attempts"]]
    assert sum(v for _, v, _ in by_name["airflow.gpu_sched.gpu_hours"]) == pytest.approx(training["gpu_hours"], abs=1e-4)
    assert sum(v for _, v, _ in by_name["airflow.gpu_sched.cost"]) == pytest.approx(training["cost"], abs=1e-4)
    assert sum(v for _, v, _ in by_name["airflow.gpu_sched.preemptions"]) == training["preemptions"] >= 1
    assert [v for _, v, _ in by_name["airflow.gpu_sched.fallbacks"]] == [1, 1]
    assert {k for entries in by_name.values() for _, _, k in entries} <= {"ms", "c"}  # no gauge: sums add up
    if statsd.tagged:
        assert [t for t, _, _ in waits] == [
            {"dag_id": dag_id, "task_id": "train", "strategy": a["strategy"], "accelerator": "NVIDIA_TESLA_A100",
             "region": LOCATION} for a in training["attempts"]]
        assert [(t["strategy"], t["to_strategy"]) for t, _, _ in by_name["airflow.gpu_sched.fallbacks"]] == [
            ("FLEX_START", "SPOT"), ("SPOT", "STANDARD")]
        assert {t["currency"] for t, _, _ in by_name["airflow.gpu_sched.cost"]} == {"USD"}
    else:
        assert all(not tags for _, tags, _, _ in packets)

    # the legacy names: distinct series per DAG, task and strategy, with or without tags
    for attempt in training["attempts"]:
        assert f"airflow.gpu_sched.capacity_wait.{dag_id}.train.{attempt['strategy']}" in by_name
    hours = {n.rsplit(".", 1)[1]: sum(v for _, v, _ in e) for n, e in by_name.items()
             if n.startswith(f"airflow.gpu_sched.gpu_hours.{dag_id}.train.")}
    assert sum(hours.values()) == pytest.approx(training["gpu_hours"], abs=1e-4)
    assert hours["STANDARD"] == pytest.approx(training["attempts"][-1]["gpu_hours"], abs=1e-4)
    assert f"airflow.gpu_sched.fallbacks.{dag_id}.train.FLEX_START" in by_name
    assert f"airflow.gpu_sched.preemptions.{dag_id}.train.SPOT" in by_name
    if statsd.tagged:  # the tags the legacy name does not embed
        tags = by_name[f"airflow.gpu_sched.gpu_hours.{dag_id}.train.STANDARD"][0][0]
        assert tags == {"accelerator": "NVIDIA_TESLA_A100", "region": LOCATION}


def test_a_task_group_id_keeps_the_legacy_names_segments():
    from airflow_gpu_sched.orchestration.metrics import metric

    found = metric("gpu_hours", 1.5, {"dag_id": "nightly", "task_id": "train.final", "strategy": "SPOT",
                                       "region": "us-central1"})
    assert found.legacy_name == "gpu_sched.gpu_hours.nightly.train__final.SPOT"
    assert found.tags["task_id"] == "train.final" and found.legacy_tags == {"region": "us-central1"}
