"""e2e_worker_crash: a training task whose first try stops right after its job was created.

Test-only hook (here, not in product code): on try 1 the operator writes its process id to
``$AIRFLOW_HOME/e2e-markers/<run_id>.pid`` once its job was created and recorded, then sleeps
instead of deferring, so the test can SIGKILL exactly that process in the window between create and defer.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING, StallAfterCreate


StallAfterSubmit = StallAfterCreate  # the default stall: marker file, then sleep

with DAG(dag_id="e2e_worker_crash", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    StallAfterSubmit(
        task_id="train",
        display_name="e2e-worker-crash",
        env={"EMULATOR_RUN_SECONDS": "60"},
        retries=1,
        retry_delay=timedelta(seconds=1),
        **{**E2E_TRAINING, "max_wait_duration": "24h"},  # the test holds the GPUs (see its _hold_gpus)
    )
