"""e2e_mapped: 50 mapped FLEX_START training tasks (one per customer) that wait at once."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(dag_id="e2e_mapped", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator.partial(
        task_id="train",
        project_id="e2e-project",
        location="us-central1",
        image_uri="us-docker.pkg.dev/e2e-project/training/trainer:latest",
        env={"EMULATOR_RUN_SECONDS": "300"},
        machine_type="a2-highgpu-1g",
        accelerator_type="NVIDIA_TESLA_A100",
        accelerator_count=1,
        max_wait_duration="1h",
        poll_interval=1,
    ).expand(display_name=[f"customer-{i:02d}" for i in range(50)])
