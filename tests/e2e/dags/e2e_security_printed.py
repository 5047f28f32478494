"""e2e_security_printed: a secret from an Airflow Variable rendered into the job's env (another in its
args), and a job
that prints it (plain, JSON-escaped, as Python's repr) on stdout and stderr while it runs and as it
fails. Its lines are tailed by the triggerer, which never read the Variable; the failure's last
lines reach the task log and the error. The secret must reach the job and nothing else."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator

PRINTS_ITS_ENV = """
import json, os, sys, time
token = os.environ["HF_TOKEN"]
print("starting with token=" + token, flush=True)
print(json.dumps({"hf_token": token}), file=sys.stderr, flush=True)
time.sleep(4)  # the triggerer's live tail reads these before the job ends
print("still at it", repr(token), flush=True)
print("token=" + token, file=sys.stderr, flush=True)
print("training failed at epoch " + os.environ["EPOCHS"], file=sys.stderr, flush=True)
print("argv", sys.argv[1:], file=sys.stderr, flush=True)  # a Variable in args only: masked in the worker
sys.exit(1)
"""

with DAG(dag_id="e2e_security_printed", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["e2e"]):
    FlexStartTrainingOperator(task_id="train", display_name="e2e-printed", command=["python", "-c", PRINTS_ITS_ENV],
                              args=["--api-secret={{ var.value.api_secret }}"],
                              env={"HF_TOKEN": "{{ var.value.hf_token }}", "EPOCHS": "3"}, failure_log_lines=3,
                              retries=0, transient_error_window=10, **E2E_TRAINING)
