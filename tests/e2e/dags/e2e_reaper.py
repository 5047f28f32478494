"""e2e_reaper_hold / e2e_reaper_retry: training tasks whose first try can stop right after its
job was created (the reaper's deployed tests, tests/e2e/test_reaper.py).

Test-only hook (here, not in product code): a run triggered with ``{"stall": true}`` writes the
try's process id and job name to ``$AIRFLOW_HOME/e2e-markers/<run_id>.pid`` once its job was
created and recorded on try 1, then sleeps instead of deferring, so the test can SIGKILL it between create
and defer. A run without it trains and defers as usual (the deferred task that keeps the
triggerer's shared poller, and so its reaper, going). ``e2e_reaper_hold`` waits 30 minutes
before its retry (the task sits in ``up_for_retry`` while the test marks it or deletes its run);
``e2e_reaper_retry`` retries after 10 s (reaper passes look at the job meanwhile).
``e2e_reaper_sync`` trains in sync mode (``deferrable=False``: the worker polls the job) with no
retry: a test loses its worker host while the job waits for GPUs, and the scheduler fails the
task on its missing heartbeat.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING, StallAfterCreate
from airflow_gpu_sched.operators import FlexStartTrainingOperator


class StallOnRequest(StallAfterCreate):
    def wants_stall(self, context):
        return bool((context["dag_run"].conf or {}).get("stall"))

for dag_id, retry_delay in (("e2e_reaper_hold", timedelta(minutes=30)), ("e2e_reaper_retry", timedelta(seconds=10))):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
        StallOnRequest(
            task_id="train",
            display_name=dag_id.replace("_", "-"),
            env={"EMULATOR_RUN_SECONDS": "60"},
            retries=1,
            retry_delay=retry_delay,
            **{**E2E_TRAINING, "max_wait_duration": "24h"},  # jobs wait for GPUs the test holds
        )

with DAG(dag_id="e2e_reaper_sync", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    FlexStartTrainingOperator(
        task_id="train",
        display_name="e2e-reaper-sync",
        env={"EMULATOR_RUN_SECONDS": "60"},
        deferrable=False,
        retries=0,  # the lost try is the last: nothing will come back for its job
        **{**E2E_TRAINING, "max_wait_duration": "24h"},
    )
