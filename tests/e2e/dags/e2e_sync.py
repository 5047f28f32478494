"""e2e_sync: one training task in sync mode (``deferrable=False``): the worker itself polls the
job, so killing the worker's host kills the wait; one retry, 1 s apart."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

with DAG(dag_id="e2e_sync", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator(
        task_id="train",
        display_name="e2e-sync",
        env={"EMULATOR_RUN_SECONDS": "60"},
        deferrable=False,
        retries=1,
        retry_delay=timedelta(seconds=1),
        **{**E2E_TRAINING, "max_wait_duration": "24h"},  # the test holds the GPUs (see its _hold_gpus)
    )
