"""e2e_scale: 1,000 mapped FLEX_START training tasks (the CeleryExecutor scale scenario): the
test gives the emulator no GPUs until all of them wait together, deferred, then a tenth of what
they need, so they run in waves. ``GPU_SCHED_SCALE_TASKS`` (in the deployment's env) sets the
count: 200 is the earlier run's (docs/deployment.md)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

# [core] max_map_length (1024 by default) caps one expand: 1,000 fits under it
SCALE_TASKS = int(os.environ.get("GPU_SCHED_SCALE_TASKS", "1000"))

# max_active_tasks: the DAG's default (16, [core] max_active_tasks_per_dag) would let only 16 of
# the run's tasks run or queue at once; every task may start, the workers' slots are the bound
with DAG(dag_id="e2e_scale", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"],
         max_active_tasks=SCALE_TASKS):
    FlexStartTrainingOperator.partial(
        task_id="train",
        env={"EMULATOR_RUN_SECONDS": "900"},  # 9 s real at the tests' 100x: they run in waves
        **{**E2E_TRAINING, "max_wait_duration": "2d"},  # 29 min real: they wait for GPUs, none expires
    ).expand(display_name=[f"scale-{i:04d}" for i in range(SCALE_TASKS)])
