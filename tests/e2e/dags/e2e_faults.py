"""e2e_faults: 50 mapped FLEX_START training tasks for the infrastructure-fault scenarios
(tests/e2e/test_faults.py). The test holds the GPUs until all 50 wait deferred, injects its
fault, then gives them GPUs. ``conf.run_seconds`` (emulated) sets how long each job runs, so a
scenario can keep jobs RUNNING across its fault; two retries absorb a try that a fault of the
platform (a database restart, a lost broker message) ends before it submits."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

FAULT_TASKS = 50

with DAG(dag_id="e2e_faults", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"],
         max_active_tasks=FAULT_TASKS):
    FlexStartTrainingOperator.partial(
        task_id="train",
        env={"EMULATOR_RUN_SECONDS": "{{ dag_run.conf.get('run_seconds', 900) }}"},
        retries=2,
        retry_delay=timedelta(seconds=5),
        # 29 min real at the tests' 100x: a held job never reaches its FLEX_START wait limit
        **{**E2E_TRAINING, "max_wait_duration": "2d"},
    ).expand(display_name=[f"fault-{i:02d}" for i in range(FAULT_TASKS)])
