"""Wait until a persistent resource has free replicas for a job's pools, before submitting it.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.orchestration.event_fields import public_spec
from airflow_gpu_sched.orchestration.outcomes import Event, error_event
from airflow_gpu_sched.orchestration.watch import TRANSIENT_ERROR_WINDOW, JobWatch
from airflow_gpu_sched.triggers.job import async_client
from airflow_gpu_sched.vertex import service_clock

WAITING_STATES = {"PROVISIONING", "REBOOTING", "UPDATING", "STATE_UNSPECIFIED"}
FAILED_STATES = {"ERROR", "STOPPING"}


class PersistentCapacityTrigger(BaseTrigger):
    """Yields ``capacity_available`` when the resource is RUNNING and every pool the job needs
    has its replicas free; ``capacity_timeout`` at ``deadline`` (epoch seconds of the service's
    time, vertex/service_clock.py, so it holds across triggerer restarts); ``failed`` when the resource goes to ERROR/STOPPING or no
    longer fits the job; ``error`` when the API stays unreachable."""

    def __init__(self, resource_name: str, job_spec: dict[str, Any], deadline: float | None,
                 gcp_conn_id: str = "google_cloud_default", poll_interval: float = 30.0,
                 transient_error_window: float = TRANSIENT_ERROR_WINDOW,
                 impersonation_chain: str | list[str] | None = None):
        super().__init__()
        self.resource_name = resource_name
        self.job_spec = public_spec(job_spec)  # what the fit reads: machines, counts; never env or args
        self.deadline = deadline
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.impersonation_chain = list(impersonation_chain) if isinstance(impersonation_chain, (list, tuple)) \
            else impersonation_chain

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "resource_name": self.resource_name, "job_spec": self.job_spec, "deadline": self.deadline,
            "gcp_conn_id": self.gcp_conn_id, "poll_interval": self.poll_interval,
            "transient_error_window": self.transient_error_window, "impersonation_chain": self.impersonation_chain,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_gpu_sched.triggers.settle import settle, started_at

        started = started_at(self)  # in a triggerer: the event waits for the deferral to settle
        event = await self._first_event()
        await settle(started)  # apache/airflow#66374: free replicas are often there at the first read
        yield TriggerEvent(event)

    async def _first_event(self) -> dict[str, Any]:
        from airflow_gpu_sched.vertex.client import VertexError
        from airflow_gpu_sched.vertex.models import CustomJobSpec
        from airflow_gpu_sched.vertex.persistent_rules import check_persistent_fit

        spec = CustomJobSpec.model_validate(self.job_spec)
        client = await async_client(self.resource_name, self.gcp_conn_id, self.poll_interval,
                                    self.transient_error_window, self.impersonation_chain)
        watch = JobWatch(self.resource_name, self.transient_error_window)
        last_note = None
        while True:
            try:
                resource = await client.get_persistent_resource(self.resource_name)
            except VertexError as exc:
                if watch.failed_poll(exc):
                    await asyncio.sleep(self.poll_interval)
                    continue
                return error_event(watch.unreachable_message(exc))
            watch.succeeded_poll()
            state = resource.state.value if resource.state else "STATE_UNSPECIFIED"
            if state in FAILED_STATES:
                message = resource.error.message if resource.error and resource.error.message else state
                return {"status": Event.FAILED.value, "message": f"{self.resource_name} is {state}: {message}"}
            note = f"{self.resource_name} is {state}"
            if state == "RUNNING":
                fit = check_persistent_fit(spec, resource)
                if fit.mismatches:
                    return {"status": Event.FAILED.value, "message": "; ".join(str(v) for v in fit.mismatches)}
                if fit.runs_now:
                    return {"status": Event.CAPACITY_AVAILABLE.value, "message": note}
                note = "; ".join(f"pool {s.resource_pool_id}: {s.free} free of {s.wanted} wanted"
                                 for s in fit.shortages)
            if note != last_note:
                self.log.info("waiting for capacity: %s", note)
                last_note = note
            if self.deadline is not None and service_clock.now() >= self.deadline:  # the service's time
                return {"status": Event.CAPACITY_TIMEOUT.value,
                        "message": f"capacity_wait_timeout passed; last seen: {note}"}
            await asyncio.sleep(self.poll_interval)
