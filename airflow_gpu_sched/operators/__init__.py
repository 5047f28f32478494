"""The training operators: ``GpuTrainingOperator(plan=[...])`` and its three presets, one
capacity strategy first each (``fallback=[...]`` for the steps after it).

    from airflow_gpu_sched.operators import (
        GpuTrainingOperator, FlexStartTrainingOperator, SpotTrainingOperator,
        PersistentResourceTrainingOperator)

May import: operators; airflow.
"""

from airflow_gpu_sched.operators.base import GpuTrainingOperator, VertexCustomJobLink, VertexTrainingOperator
from airflow_gpu_sched.operators.flex_start import FlexStartTrainingOperator
from airflow_gpu_sched.operators.persistent import PersistentResourceTrainingOperator
from airflow_gpu_sched.operators.spot import SpotTrainingOperator

__all__ = [
    "FlexStartTrainingOperator",
    "GpuTrainingOperator",
    "PersistentResourceTrainingOperator",
    "SpotTrainingOperator",
    "VertexCustomJobLink",
    "VertexTrainingOperator",
]
