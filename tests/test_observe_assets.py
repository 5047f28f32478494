"""Asset events of training tasks, recorded in Airflow's DB after ``dag.test()`` against the
emulator, and the example ``nightly_deploy`` DAG (scheduled on the model Asset) reading one."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

EXAMPLES = Path(__file__).parent.parent / "dags_examples"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 2.0, "SPOT": 1.0}}
SERVING = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-gpu.2-4:latest"


def _events(uri: str) -> list:
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                               .where(AssetModel.uri == uri).order_by(AssetEvent.id))
        return [(row.source_dag_id, row.source_task_id, dict(row.extra)) for row in rows]


def _producer():
    from airflow.sdk import DAG, Asset

    from airflow_gpu_sched.operators import FlexStartTrainingOperator, SpotTrainingOperator

    with DAG("nightly_producer", schedule=None, start_date=START) as dag:
        register = FlexStartTrainingOperator(
            task_id="train_and_register", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            job_type="training_pipeline", model_display_name="nightly-model", model_serving_image_uri=SERVING,
            max_wait_duration="1h", base_output_dir="gs://bucket/nightly/{{ ds_nodash }}/final",
            args=["--data=gs://bucket/data/{{ ds }}/train.jsonl"], prices=PRICES, poll_interval=0.02, **A100)
        declared = SpotTrainingOperator(
            task_id="train_declared", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            base_output_dir="gs://bucket/spot/{{ ds_nodash }}", outlets=[Asset("gs://bucket/declared")],
            poll_interval=0.02, **A100)
    return dag, register, declared


def test_the_operator_derives_its_outlets_unless_they_are_declared():
    from airflow.sdk import Asset

    from airflow_gpu_sched.operators import model_asset

    _, register, declared = _producer()
    assert register.outlets == [Asset("gs://bucket/nightly"), model_asset(PROJECT, LOCATION, "nightly-model")]
    assert model_asset(PROJECT, LOCATION, "nightly-model").uri == f"vertex-ai://{PROJECT}/{LOCATION}/models/nightly-model"
    assert declared.outlets == [Asset("gs://bucket/declared")]


@pytest.fixture
def produced(airflow_db, fast_emulator):
    dag, _, _ = _producer()
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    return result


def test_a_training_pipeline_emits_events_for_its_model_and_output_dir(produced, fast_emulator):
    training = produced["train_and_register"].return_value
    model_uri = f"vertex-ai://{PROJECT}/{LOCATION}/models/nightly-model"
    (dag_id, task_id, extra), *_ = _events(model_uri)[-1:]
    assert (dag_id, task_id) == ("nightly_producer", "train_and_register")
    assert extra == {
        "job_name": training["job_name"], "strategy": "FLEX_START", "state": training["state"],
        "attempts": 1, "gpu_hours": training["gpu_hours"], "cost": training["cost"], "currency": "USD",
        "output_dir": "gs://bucket/nightly/20260101/final", "console_url": training["console_url"],
        "model_name": training["model_name"], "model_version": training["model_version"]}
    assert extra["gpu_hours"] > 0 and extra["cost"] == pytest.approx(2.0 * extra["gpu_hours"], abs=1e-3)
    assert extra["model_name"].startswith(f"projects/{PROJECT}/locations/{LOCATION}/models/")
    assert _events("gs://bucket/nightly")[-1][2] == extra  # the output dir's Asset: the same extra
    declared = produced["train_declared"].return_value
    assert _events("gs://bucket/declared")[-1][2]["job_name"] == declared["job_name"]
    assert "model_name" not in _events("gs://bucket/declared")[-1][2]
    # declared outlets replace the derived ones (other tests' DAGs may write gs://bucket/spot/...)
    assert [e for e in _events("gs://bucket/spot") if e[0] == "nightly_producer"] == []


def test_nightly_deploy_reads_the_model_event_and_checks_the_version(produced, fast_emulator, monkeypatch):
    monkeypatch.setenv("GPU_SCHED_PROJECT", PROJECT)
    monkeypatch.setenv("GPU_SCHED_LOCATION", LOCATION)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for name in [m for m in sys.modules if m == "_settings"]:
        monkeypatch.delitem(sys.modules, name)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES / "nightly_deploy.py"))
    assert bag.import_errors == {}
    dag = bag.get_dag("nightly_deploy")
    assert [a.uri for a in dag.timetable.asset_condition.objects] == [
        f"vertex-ai://{PROJECT}/{LOCATION}/models/nightly-model"]  # scheduled on the model Asset
    training = produced["train_and_register"].return_value
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    assert result["new_model_version"].return_value["model_version"] == training["model_version"]
    assert result["new_model_version"].return_value["job_name"] == training["job_name"]
    checked = result["deploy"].return_value
    assert checked == {"model": training["model_name"], "version": training["model_version"],
                       "serving_image": SERVING, "artifact_uri": checked["artifact_uri"]}
