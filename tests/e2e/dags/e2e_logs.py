"""e2e_logs: one FLEX_START training that runs 50 emulated minutes (30 s real at 100x) and logs a
checkpoint each emulated minute: its lines stream into the task log from the triggerer."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(dag_id="e2e_logs", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator(task_id="train", display_name="e2e-logs", env={"EMULATOR_RUN_SECONDS": "3000"},
                              deferrable=True, **E2E_TRAINING)
