"""The training operators: one capacity strategy each, one shared base.

    from airflow_gpu_sched.operators import (
        FlexStartTrainingOperator, SpotTrainingOperator, PersistentResourceTrainingOperator)
"""

from airflow_gpu_sched.operators.base import VertexCustomJobLink, VertexTrainingOperator
from airflow_gpu_sched.operators.flex_start import FlexStartTrainingOperator
from airflow_gpu_sched.operators.persistent import PersistentResourceTrainingOperator
from airflow_gpu_sched.operators.spot import SpotTrainingOperator

__all__ = [
    "FlexStartTrainingOperator",
    "PersistentResourceTrainingOperator",
    "SpotTrainingOperator",
    "VertexCustomJobLink",
    "VertexTrainingOperator",
]
