"""e2e_ui: the night the UI plugin test draws (copied into the deployment's DAGs folder).

``train`` plans FLEX_START (no A100 comes within its 20-minute wait) then SPOT (preempted past
the service's restarts by the test, resubmitted); ``train_small`` gets FLEX_START capacity.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator, GpuTrainingOperator

PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 1.6, "SPOT": 1.1}}
TASK = {k: v for k, v in E2E_TRAINING.items() if k != "max_wait_duration"}

with DAG(dag_id="e2e_ui", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    GpuTrainingOperator(
        task_id="train", display_name="e2e-ui-train", base_output_dir="gs://e2e-bucket/ui",
        env={"EMULATOR_RUN_SECONDS": "900"}, prices=PRICES,
        plan=[{"strategy": "FLEX_START", "max_wait_duration": "20m"},
              {"strategy": "SPOT", "max_preemption_retries": 2}],
        **TASK,
    )
    FlexStartTrainingOperator(
        task_id="train_small", display_name="e2e-ui-small", base_output_dir="gs://e2e-bucket/ui-small",
        env={"EMULATOR_RUN_SECONDS": "300"}, prices=PRICES, location="us-east4",
        **{k: v for k, v in E2E_TRAINING.items() if k != "location"},
    )
