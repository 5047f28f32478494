"""e2e_scale: 200 mapped FLEX_START training tasks (the CeleryExecutor scale scenario): more
than the emulator's GPUs can hold at once, so they queue, defer, and wait together."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

SCALE_TASKS = 200

with DAG(dag_id="e2e_scale", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"],
         max_active_tasks=SCALE_TASKS):
    FlexStartTrainingOperator.partial(
        task_id="train",
        env={"EMULATOR_RUN_SECONDS": "900"},  # 9 s real at the tests' 100x: 4 GPUs free up slowly
        **{**E2E_TRAINING, "max_wait_duration": "1d"},  # 14 min real: they wait, none expires
    ).expand(display_name=[f"scale-{i:03d}" for i in range(SCALE_TASKS)])
