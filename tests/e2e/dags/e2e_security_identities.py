"""e2e_security_impersonated / e2e_security_federated: the training task of e2e_security, once
impersonating a service account through a delegate (operator argument, on the planted-key
connection), once as a workload identity federation config (the ``gcp_wif`` connection)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

HOP = "hop@e2e-project.iam.gserviceaccount.com"
TARGET = "vertex-trainer@e2e-project.iam.gserviceaccount.com"

with DAG(dag_id="e2e_security_impersonated", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["e2e"]):
    FlexStartTrainingOperator(task_id="train", display_name="e2e-impersonated", env={"EMULATOR_RUN_SECONDS": "60"},
                              transient_error_window=10, impersonation_chain=[HOP, TARGET], **E2E_TRAINING)

with DAG(dag_id="e2e_security_federated", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["e2e"]):
    FlexStartTrainingOperator(task_id="train", display_name="e2e-federated", env={"EMULATOR_RUN_SECONDS": "60"},
                              transient_error_window=10, gcp_conn_id="gcp_wif", **E2E_TRAINING)
