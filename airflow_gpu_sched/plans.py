"""Kept for old imports (DAG files took the plan steps from here): the steps live in
:mod:`airflow_gpu_sched.orchestration.plans`."""
from airflow_gpu_sched.orchestration.plans import *  # noqa: F401,F403
