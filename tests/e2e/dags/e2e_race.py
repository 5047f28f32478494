"""A hedged race in deployed Airflow: FLEX_START in us-central1 against SPOT in us-east4."""

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import GpuTrainingOperator

TASK = {k: v for k, v in E2E_TRAINING.items() if k != "max_wait_duration"}

with DAG("e2e_race", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    GpuTrainingOperator(task_id="train", deferrable=True, env={"EMULATOR_RUN_SECONDS": "60"},
                        plan=[{"race": [{"strategy": "FLEX_START", "max_wait_duration": "1h"},
                                        {"strategy": "SPOT", "locations": ["us-east4"]}]}], **TASK)
