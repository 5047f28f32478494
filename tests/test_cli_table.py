"""`jobs list`'s table fits a 120-column terminal (issue 41: full resource names and timestamps made
it over 250 wide): short ids, ages, states without their prefix, long DAG and task ids cut;
``--wide`` keeps every column in full. Against the emulator, through ``main(argv)``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import requests

from airflow_gpu_sched.tools import platform
from airflow_gpu_sched.tools.cli import main
from tests.conftest import LOCATION, PROJECT

WHERE = ["--project", PROJECT, "--location", LOCATION]
A100 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
LONG_DAG = "nightly-retraining-of-the-churn-model-for-every-region-and-tier"[:63]  # a label's longest
LONG_TASK = "train-on-flex-start-then-spot-then-standard-with-fallbacks"[:63]


def _job(emulator, **labels: str) -> dict:
    return requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5, json={
        "displayName": "by-hand", "labels": {"managed-by": "airflow-gpu-sched", **labels},
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": A100, "replicaCount": "1",
                                         "containerSpec": {"imageUri": "gcr.io/p/x"}}],
                    "scheduling": {"strategy": "SPOT"}}}).json()


def _run(capsys, *argv: str) -> list[str]:
    capsys.readouterr()
    assert main(["jobs", "list", *WHERE, *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_table_fits_120_columns_and_wide_shows_every_column(capsys, vertex_conn):
    job = _job(vertex_conn, **{"airflow-dag": LONG_DAG, "airflow-task": LONG_TASK, "airflow-map-index": "117",
                               "airflow-try": "12", "airflow-run": "scheduled__2026-12-05t02-00-00-00-00"})
    short_id = job["name"].rsplit("/", 1)[-1]

    table = _run(capsys)  # no -o: the table, as a user types it
    assert max(len(line) for line in table) <= 120, "\n".join(table)
    assert table[0].split() == ["DAG", "TASK", "TRY", "STRATEGY", "STATE", "CREATED", "JOB"]
    assert short_id in table[1] and job["name"] not in table[1]
    assert "ago" in table[1] and "SPOT" in table[1] and "JOB_STATE_" not in table[1]
    assert LONG_DAG[:23] + "…" in table[1]  # cut, and says so

    wide = _run(capsys, "--wide")
    assert wide[0].split()[:3] == ["DAG", "TASK", "MAP_INDEX"] and "NAME" in wide[0]
    assert job["name"] in wide[1] and LONG_DAG in wide[1] and LONG_TASK in wide[1]
    assert job["createTime"][:19] in wide[1]  # the full timestamp


def test_the_narrow_rows_bound_every_column_whatever_the_values():
    """The pure part: every cell within its column's cap, whatever Vertex answers, so the table
    never passes 120 columns (the caps and two spaces between columns)."""
    assert sum(platform.SHORT_JOB_COLUMNS.values()) + 2 * (len(platform.SHORT_JOB_COLUMNS) - 1) <= 120
    now = datetime(2026, 12, 5, 8, 0, tzinfo=timezone.utc)
    row = platform.JobRow(
        name="projects/p/locations/l/trainingPipelines/9223372036854775807", job_type="training_pipeline",
        dag="d" * 63, task="t" * 63, map_index="99999", run="r", try_number="999", strategy="PERSISTENT_RESOURCE",
        state="PIPELINE_STATE_PARTIALLY_SUCCEEDED", created=(now - timedelta(days=400)).isoformat(),
        started=None, ended=None)
    [short] = platform.short_job_rows([row], now)
    for column, cap in platform.SHORT_JOB_COLUMNS.items():
        assert short[column] is None or len(short[column]) <= cap, (column, short[column])
    assert short["strategy"] == "PERSISTENT" and short["state"] == "PARTIALLY_SUCCEEDED"
    assert short["job"] == "9223372036854775807" and short["created"] == "400d ago"
    assert [platform.age((now - timedelta(seconds=s)).isoformat(), now) for s in (5, 300, 7200)] == [
        "5s ago", "5m ago", "2h ago"]
