"""Kept for old imports (callbacks caught the operators' errors from here): the errors live in
:mod:`airflow_gpu_sched.orchestration.errors`."""
from airflow_gpu_sched.orchestration.errors import *  # noqa: F401,F403
