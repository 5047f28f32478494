"""Airflow users' habits: ``[operators] default_deferrable``, templated arguments (plan steps
too) rendered before anything is submitted. Through ``dag.test()`` against the emulator."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from tests.airflow_harness import run_dag, set_connection_env
from tests.conftest import LOCATION, PROJECT, with_a100_pool

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("setting, expected", [(None, False), ("True", True), ("False", False)])
def test_deferrable_defaults_to_the_airflow_config(setting, expected):
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"}
    if setting is not None:
        env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = setting
    probe = ("from airflow_gpu_sched.operators import SpotTrainingOperator as S\n"
             "op = S(task_id='t', project_id='p', location='us-central1', image_uri='gcr.io/p/t:1',"
             " machine_type='a2-highgpu-1g', accelerator_type='NVIDIA_TESLA_A100', accelerator_count=1)\n"
             "print(op.deferrable)")
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == str(expected)


PARAMS = {"project": PROJECT, "location": LOCATION, "sa": "trainer@proj.iam.gserviceaccount.com",
          "machine": "a2-highgpu-1g", "gpu": "NVIDIA_TESLA_A100", "count": 1, "entry": "python",
          "pool": "pool-a", "wait": "10m", "conn": "vertex_templated"}


def _templated_dag(dag_id: str, params: dict):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(dag_id, schedule=None, start_date=START, params=params) as dag:
        GpuTrainingOperator(
            task_id="train", project_id="{{ params.project }}", location="{{ params.location }}",
            service_account="{{ params.sa }}", image_uri="gcr.io/p/trainer:1",
            machine_type="{{ params.machine }}", accelerator_type="{{ params.gpu }}",
            accelerator_count="{{ params.count }}", command=["{{ params.entry }}", "train.py"],
            gcp_conn_id="{{ params.conn }}", poll_interval=0.02, quota_preflight=False,
            plan=[{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "{{ params.pool }}",
                   "capacity_wait_timeout": "{{ params.wait }}"}])
    return dag


def test_every_templated_argument_reaches_the_submitted_job_rendered(airflow_db, emulator, monkeypatch):
    emulator.reset(with_a100_pool("pool-a"))
    # only the templated connection points at the emulator: a job there proves gcp_conn_id rendered
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    set_connection_env(monkeypatch, "vertex_templated", "google_cloud_platform",
                       extra={"project": PROJECT, "api_endpoint": emulator.url})
    result = run_dag(_templated_dag("templated_everything", PARAMS), logical_date=START)
    assert result.state == "success", result["train"].state
    name = result["train"].return_value["job_name"]
    assert name.startswith(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/")
    job = requests.get(f"{emulator.url}/v1/{name}", timeout=5).json()
    spec = job["jobSpec"]
    assert spec["persistentResourceId"] == "pool-a"
    assert spec["serviceAccount"] == PARAMS["sa"]
    pool = spec["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                   "acceleratorCount": 1}
    assert pool["containerSpec"]["command"] == ["python", "train.py"]


def test_a_templated_step_value_is_checked_once_rendered_before_any_job(airflow_db, fast_emulator):
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    fast_emulator.reset(with_a100_pool("pool-a"))
    params = {**PARAMS, "conn": "google_cloud_default", "pool": "Not_A_Pool", "count": "two"}
    dag = _templated_dag("templated_bad_step", params)  # parses: the values are still templates
    result = run_dag(dag, logical_date=START)
    assert result.state == "failed" and result["train"].state == "failed"
    assert requests.get(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                        timeout=5).json().get("customJobs", []) == []
    # the reason, named: the plan's step value is checked as soon as it is rendered
    task = dag.get_task("train")
    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\]\.persistent_resource_id.*'Not_A_Pool'"):
        task.render_template_fields({"params": params})
    # the same values written literally are refused when the DAG is parsed, naming the fields
    from airflow_gpu_sched.operators import GpuTrainingOperator

    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\]\.persistent_resource_id"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                            machine_type="a2-highgpu-1g", plan=[{"strategy": "PERSISTENT_RESOURCE",
                                                                 "persistent_resource_id": "Not_A_Pool"}])
    with pytest.raises(InvalidTrainingSpec, match="accelerator_count"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
                            accelerator_count="two", plan=[{"strategy": "STANDARD"}])


def test_the_persistent_preset_takes_a_templated_resource_id(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import PersistentResourceTrainingOperator

    fast_emulator.reset(with_a100_pool("pool-b"))
    with DAG("templated_pool", schedule=None, start_date=START, params={"pool": "pool-b"}) as dag:
        PersistentResourceTrainingOperator(
            task_id="train", project_id=PROJECT, location=LOCATION, persistent_resource_id="{{ params.pool }}",
            image_uri="gcr.io/p/trainer:1", machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
            accelerator_count=1, poll_interval=0.02)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    job = requests.get(f"{fast_emulator.url}/v1/{result['train'].return_value['job_name']}", timeout=5).json()
    assert job["jobSpec"]["persistentResourceId"] == "pool-b"
