"""e2e_security_variable: a secret from an Airflow Variable rendered into the job's env and args,
one task on FLEX_START (its trigger's event) and one on a busy persistent resource (its capacity
trigger's kwargs hold the job's spec). The secret must reach the job and nothing else."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator, PersistentResourceTrainingOperator

SECRET_ENV = {"EMULATOR_RUN_SECONDS": "60", "HF_TOKEN": "{{ var.value.hf_token }}"}
SECRET_ARGS = ["--hf-token={{ var.value.hf_token }}"]

with DAG(dag_id="e2e_security_variable", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["e2e"]):
    FlexStartTrainingOperator(task_id="train", display_name="e2e-variable", env=SECRET_ENV, args=SECRET_ARGS,
                              transient_error_window=10, **E2E_TRAINING)
    pool = {k: v for k, v in E2E_TRAINING.items() if k != "max_wait_duration"}
    # capacity_wait_timeout counts the service's time (one clock): 24 h at the emulator's 100x is 864 real s,
    # the old 30 real minutes' margin for the test's checks while it waits
    PersistentResourceTrainingOperator(task_id="on_pool", display_name="e2e-variable-pool",
                                       persistent_resource_id="secret-pool", capacity_wait_timeout="24h",
                                       env=SECRET_ENV, args=SECRET_ARGS, transient_error_window=10, **pool)
