"""Kept for old imports (the README showed ``from airflow_gpu_sched.client import VertexClient``):
the clients live in :mod:`airflow_gpu_sched.vertex.client`."""
from airflow_gpu_sched.vertex.client import *  # noqa: F401,F403
