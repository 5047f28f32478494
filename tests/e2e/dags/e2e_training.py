"""e2e_training: one FLEX_START training job on the emulator (copied into the deployment's DAGs folder)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(
    dag_id="e2e_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["e2e"],
):
    FlexStartTrainingOperator(
        task_id="train",
        project_id="e2e-project",
        location="us-central1",
        display_name="e2e-training",
        image_uri="us-docker.pkg.dev/e2e-project/training/trainer:latest",
        command=["python", "-m", "trainer.task"],
        args=["--epochs=1"],
        env={"EMULATOR_RUN_SECONDS": "60"},
        machine_type="a2-highgpu-1g",
        accelerator_type="NVIDIA_TESLA_A100",
        accelerator_count=1,
        max_wait_duration="1h",
        base_output_dir="gs://e2e-bucket/e2e",
        poll_interval=1,
    )
