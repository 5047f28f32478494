"""The training operators: ``GpuTrainingOperator(plan=[...])`` and its three presets, one
capacity strategy first each (``fallback=[...]`` for the steps after it).

    from airflow_gpu_sched.operators import (
        GpuTrainingOperator, FlexStartTrainingOperator, SpotTrainingOperator,
        PersistentResourceTrainingOperator)

``model_asset(project_id, location, model_display_name)`` is the Asset a training pipeline of
that model updates (schedule a deploy DAG on it; docs/operators.md, "Assets").

May import: operators, orchestration; airflow.
"""

from airflow_gpu_sched.operators.base import GpuTrainingOperator, VertexCustomJobLink, VertexTrainingOperator
from airflow_gpu_sched.operators.flex_start import FlexStartTrainingOperator
from airflow_gpu_sched.operators.persistent import PersistentResourceTrainingOperator
from airflow_gpu_sched.operators.spot import SpotTrainingOperator
from airflow_gpu_sched.orchestration.assets import model_asset

__all__ = [
    "FlexStartTrainingOperator",
    "GpuTrainingOperator",
    "PersistentResourceTrainingOperator",
    "SpotTrainingOperator",
    "VertexCustomJobLink",
    "VertexTrainingOperator",
    "model_asset",
]
