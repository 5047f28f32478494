"""e2e_security: one training task whose connection carries a (planted) service-account key."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(dag_id="e2e_security", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator(
        task_id="train",
        display_name="e2e-security",
        env={"EMULATOR_RUN_SECONDS": "60"},
        transient_error_window=10,
        **E2E_TRAINING,
    )
