"""e2e_scale: 200 mapped FLEX_START training tasks (the CeleryExecutor scale scenario): the
test gives the emulator no GPUs until all of them wait together, deferred, then a tenth of what
they need, so they run in waves."""

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
        env={"EMULATOR_RUN_SECONDS": "900"},  # 9 s real at the tests' 100x: they run in waves
        **{**E2E_TRAINING, "max_wait_duration": "2d"},  # 29 min real: they wait for GPUs, none expires
    ).expand(display_name=[f"scale-{i:03d}" for i in range(SCALE_TASKS)])
