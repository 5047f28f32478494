"""Train on a persistent resource, after checking that a matching pool has free replicas.

May import: orchestration, operators; airflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators.base import VertexTrainingOperator
from airflow_gpu_sched.orchestration.training_spec import step_duration_arg as _step_duration_arg

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration.plans import Step


class PersistentResourceTrainingOperator(VertexTrainingOperator):
    """Run the job on a persistent resource (``jobSpec.persistentResourceId``).

    Before submitting, the resource is read: it must be RUNNING (PROVISIONING, REBOOTING and
    UPDATING are waited for; ERROR or STOPPING fail with the resource's error, or fall back),
    and every worker pool must match a resource pool exactly (machine type, accelerator, boot
    disk type) and fit its size, else the task fails before submitting, listing every mismatch.
    A spec that fits but finds the pool busy waits (deferred) until the replicas are free or
    ``capacity_wait_timeout`` passes (:class:`PersistentCapacityTimeout`, or the fallback).

    :param persistent_resource_id: the resource's id (or full name).
    :param capacity_wait_timeout: how long to wait for free replicas (default 1 hour; None waits forever).
    """

    template_fields = (*VertexTrainingOperator.template_fields, "persistent_resource_id")

    def __init__(self, *, persistent_resource_id: str,
                 capacity_wait_timeout: timedelta | float | str | None = timedelta(hours=1),
                 **kwargs: Any) -> None:
        self.persistent_resource_id = persistent_resource_id
        self.capacity_wait_timeout = _step_duration_arg("capacity_wait_timeout", capacity_wait_timeout)
        super().__init__(**kwargs)

    def own_steps(self) -> list[Step | dict]:
        return [{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": self.persistent_resource_id,
                 "capacity_wait_timeout": self.capacity_wait_timeout}]
