"""Train on a persistent resource, after checking that a matching pool has free replicas."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow_gpu_sched.errors import (
    InvalidTrainingSpec,
    PersistentCapacityTimeout,
    PersistentResourceUnavailable,
    VertexUnreachable,
)
from airflow_gpu_sched.operators.base import VertexTrainingOperator, _duration_arg, first_event, vertex_reachable
from airflow_gpu_sched.outcomes import CAPACITY_EVENTS, Event, validate_event
from airflow_gpu_sched.rules import check_persistent_fit

FAILED_STATES = {"ERROR", "STOPPING"}


class PersistentResourceTrainingOperator(VertexTrainingOperator):
    """Run the job on a persistent resource (``jobSpec.persistentResourceId``).

    Before submitting, the resource is read: it must be RUNNING (PROVISIONING, REBOOTING and
    UPDATING are waited for; ERROR or STOPPING fail with the resource's error), and every worker
    pool must match a resource pool exactly (machine type, accelerator, boot disk type) and fit
    its size, else the task fails before submitting, listing every mismatch. A spec that fits
    but finds the pool busy waits (deferred) until the replicas are free or
    ``capacity_wait_timeout`` passes (:class:`PersistentCapacityTimeout`).

    :param persistent_resource_id: the resource's id (or full name).
    :param capacity_wait_timeout: how long to wait for free replicas (default 1 hour; None waits forever).
    """

    strategy = "STANDARD"

    def __init__(self, *, persistent_resource_id: str,
                 capacity_wait_timeout: timedelta | float | str | None = timedelta(hours=1),
                 **kwargs: Any) -> None:
        self.persistent_resource_id = persistent_resource_id.rsplit("/", 1)[-1]
        self.capacity_wait_timeout = _duration_arg("capacity_wait_timeout", capacity_wait_timeout)
        super().__init__(**kwargs)

    def scheduling(self) -> dict[str, Any]:
        block = super().scheduling()
        block.pop("strategy")  # a persistent resource's VMs already exist: no capacity strategy
        return block

    def persistent_resource(self) -> str | None:
        return self.persistent_resource_id

    @property
    def resource_name(self) -> str:
        return f"projects/{self.project_id}/locations/{self.location}/persistentResources/{self.persistent_resource_id}"

    def start(self, context, ledger):
        resource = self.client().get_persistent_resource(self.resource_name)
        state = resource.state.value if resource.state else "STATE_UNSPECIFIED"
        if state in FAILED_STATES:
            raise PersistentResourceUnavailable(
                f"persistent resource {self.resource_name} is {state}", None,
                resource.error.message if resource.error else None)
        job = self.validated_job(context)
        fit = check_persistent_fit(job.job_spec, resource)
        if fit.mismatches:
            raise InvalidTrainingSpec(fit.mismatches, f"job for persistent resource {self.persistent_resource_id!r}")
        if state == "RUNNING" and fit.runs_now:
            return super().start(context, ledger)
        self.log.info("persistent resource %s is %s%s: waiting up to %s for capacity", self.resource_name, state,
                      "".join(f"; pool {s.resource_pool_id} has {s.free} of {s.wanted} replicas free"
                              for s in fit.shortages), self.capacity_wait_timeout or "ever")
        return self.wait_for_capacity(context, job.job_spec.to_api())

    def wait_for_capacity(self, context, job_spec: dict[str, Any]) -> Any:
        from airflow_gpu_sched.triggers import PersistentCapacityTrigger

        deadline = time.time() + self.capacity_wait_timeout.total_seconds() if self.capacity_wait_timeout else None
        trigger = PersistentCapacityTrigger(self.resource_name, job_spec, deadline, self.gcp_conn_id,
                                            self.poll_interval, self.transient_error_window)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_capacity")
        return self.execute_capacity(context, first_event(trigger))

    def execute_capacity(self, context, event: dict[str, Any]) -> Any:
        with vertex_reachable():
            return self._on_capacity_event(context, event)

    def _on_capacity_event(self, context, event: dict[str, Any]) -> Any:
        from airflow_gpu_sched.ledger import SubmissionLedger

        kind, event = validate_event(event, CAPACITY_EVENTS)
        message = event.get("message")
        if kind is Event.CAPACITY_AVAILABLE:
            self.log.info("capacity is free (%s): submitting", message)
            return super().start(context, SubmissionLedger.from_context(context))
        if kind is Event.CAPACITY_TIMEOUT:
            raise PersistentCapacityTimeout(
                f"persistent resource {self.resource_name} stayed busy past capacity_wait_timeout "
                f"({self.capacity_wait_timeout})", None, message)
        if kind is Event.FAILED:
            raise PersistentResourceUnavailable(f"persistent resource {self.resource_name} cannot take the job",
                                                None, message)
        raise VertexUnreachable(message or "Vertex AI unreachable")
