"""e2e_stop: the plan of issue 37, FLEX_START in us-central1 (the test gives it no GPUs) then
SPOT in us-east4 (GPUs there): a try killed while FLEX_START waits must not go on to SPOT.
One DAG deferred (the triggerer waits), one in sync mode (the worker polls), and one deferred
with an ``execution_timeout`` that ends the deferral (Airflow times the trigger out and resumes
the task only to fail it: no ``on_kill`` anywhere)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import GpuTrainingOperator

TASK = {k: v for k, v in E2E_TRAINING.items() if k != "max_wait_duration"}
PLAN = [{"strategy": "FLEX_START", "max_wait_duration": "23h"}, {"strategy": "SPOT", "locations": ["us-east4"]}]

for dag_id, deferrable in (("e2e_stop_deferred", True), ("e2e_stop_sync", False)):
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
        GpuTrainingOperator(task_id="train", deferrable=deferrable, env={"EMULATOR_RUN_SECONDS": "60"},
                            plan=PLAN, **TASK)

with DAG("e2e_stop_timeout", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    GpuTrainingOperator(task_id="train", deferrable=True, env={"EMULATOR_RUN_SECONDS": "60"}, plan=PLAN,
                        execution_timeout=timedelta(seconds=40), **TASK)
