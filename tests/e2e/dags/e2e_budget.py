"""e2e_budget: 10 mapped FLEX_START tasks of one DAG run share a RunBudget that fits 3 of them.

Each task reserves its dearest step's expected cost (no ``budget=``): 2.0 USD per A100-hour x 1
GPU x ``expected_run_time`` 1 h = 2.0; the run's budget is 7.0, so the first 3 reservations in
stamp order hold and the other 7 fail with ``BudgetExceeded`` before asking for GPUs.

Test-only hook (here, not in product code): the first admitted task whose job was created on
try 1 (an exclusive marker file under ``$AIRFLOW_HOME/e2e-markers``) writes its process id and
job name there, then sleeps instead of deferring, so the test can
SIGKILL it between create and defer; its retry must keep its reservation.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING, StallAfterCreate
from airflow_gpu_sched.orchestration.run_budget import RunBudget

TASKS, PRICE, LIMIT = 10, 2.0, 7.0  # tests/e2e/test_budget.py reads these
PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": PRICE}}


class StallOnceAfterSubmit(StallAfterCreate):
    """Only the first admitted task to get here stalls (its marker is created exclusively)."""

    def stall(self, context, name):
        markers = Path(os.environ["AIRFLOW_HOME"]) / "e2e-markers"
        markers.mkdir(exist_ok=True)
        try:
            fd = os.open(markers / "e2e_budget.pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another admitted task is the one that stalls
        os.write(fd, f"{os.getpid()} {name} {context['run_id']} {context['ti'].map_index}".encode())
        os.close(fd)
        time.sleep(600)  # the test kills us here: the job exists, the task has not deferred

with DAG(dag_id="e2e_budget", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"],
         max_active_tasks=TASKS):
    StallOnceAfterSubmit.partial(
        task_id="train",
        env={"EMULATOR_RUN_SECONDS": "60"},
        retries=1,
        retry_delay=timedelta(seconds=1),
        prices=PRICES,
        expected_run_time=timedelta(hours=1),
        run_budget=RunBudget("night", LIMIT),
        **{**E2E_TRAINING, "max_wait_duration": "24h"},  # the test holds the GPUs until all have decided
    ).expand(display_name=[f"customer-{i:02d}" for i in range(TASKS)])
