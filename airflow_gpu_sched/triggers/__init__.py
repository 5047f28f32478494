"""Deferrable triggers: one polling loop each, JSON-safe ``serialize()``, events from a closed set
(:class:`airflow_gpu_sched.outcomes.Event`), ``on_kill`` cancels the remote job."""

from airflow_gpu_sched.triggers.capacity import PersistentCapacityTrigger
from airflow_gpu_sched.triggers.job import CustomJobTrigger

__all__ = ["CustomJobTrigger", "PersistentCapacityTrigger"]
