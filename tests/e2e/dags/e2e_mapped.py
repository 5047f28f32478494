"""e2e_mapped: 50 mapped FLEX_START training tasks (one per customer) that wait at once."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(dag_id="e2e_mapped", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator.partial(
        task_id="train",
        env={"EMULATOR_RUN_SECONDS": "300"},
        **E2E_TRAINING,
    ).expand(display_name=[f"customer-{i:02d}" for i in range(50)])
