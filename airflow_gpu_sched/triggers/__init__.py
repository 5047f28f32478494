"""Deferrable triggers: one polling loop each, JSON-safe ``serialize()``, events from a closed set
(:class:`airflow_gpu_sched.orchestration.outcomes.Event`), ``on_kill`` cancels the remote job.

May import: triggers; airflow.
"""

from airflow_gpu_sched.triggers.capacity import PersistentCapacityTrigger
from airflow_gpu_sched.triggers.job import CustomJobTrigger
from airflow_gpu_sched.triggers.race import RaceTrigger

__all__ = ["CustomJobTrigger", "PersistentCapacityTrigger", "RaceTrigger"]
