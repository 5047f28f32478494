"""e2e_outage: one training task with a 20-second transient-error window (the default is 10
minutes) and no Airflow retries, so an emulator outage longer than the window fails it."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

TRANSIENT_ERROR_WINDOW = 20

with DAG(dag_id="e2e_outage", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator(
        task_id="train",
        display_name="e2e-outage",
        env={"EMULATOR_RUN_SECONDS": "60"},
        transient_error_window=TRANSIENT_ERROR_WINDOW,
        retries=0,
        **E2E_TRAINING,
    )
