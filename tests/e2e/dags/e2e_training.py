"""e2e_training: one FLEX_START training job on the emulator (copied into the deployment's DAGs folder)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
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
        display_name="e2e-training",
        command=["python", "-m", "trainer.task"],
        args=["--epochs=1"],
        env={"EMULATOR_RUN_SECONDS": "60"},
        base_output_dir="gs://e2e-bucket/e2e",
        **E2E_TRAINING,
    )
