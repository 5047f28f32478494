"""Wait for a Vertex AI custom job to finish, in the triggerer's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.outcomes import error_event, event_for_job
from airflow_gpu_sched.watch import TRANSIENT_ERROR_WINDOW, JobWatch

ON_KILL_TIMEOUT = 30.0  # the triggerer bounds on_kill too; cancel is one small request


def location_of(resource_name: str) -> str:
    return resource_name.split("/")[3]


async def async_client(resource_name: str, gcp_conn_id: str, poll_interval: float, window: float):
    """One async client per call site; its httpx pool is shared by every trigger in the loop."""
    from airflow_gpu_sched.client import AsyncVertexClient, RetryPolicy

    # One poll retries briefly on its own; the longer transient-error window is the watch's.
    deadline = min(max(10.0, poll_interval), window)
    retry = RetryPolicy(initial=min(1.0, poll_interval), maximum=10.0, deadline=deadline)
    return await AsyncVertexClient.afrom_connection(gcp_conn_id, location=location_of(resource_name), retry=retry)


class CustomJobTrigger(BaseTrigger):
    """Polls one job; yields one event (``succeeded``, ``failed``, ``cancelled``, ``preempted``,
    ``capacity_timeout`` or ``error``) when it ends or the API stays unreachable."""

    def __init__(self, job_name: str, gcp_conn_id: str = "google_cloud_default", poll_interval: float = 30.0,
                 transient_error_window: float = TRANSIENT_ERROR_WINDOW, observed_restarts: int = 0):
        super().__init__()
        self.job_name = job_name
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.observed_restarts = int(observed_restarts)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "gcp_conn_id": self.gcp_conn_id, "poll_interval": self.poll_interval,
            "transient_error_window": self.transient_error_window, "observed_restarts": self.observed_restarts,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_gpu_sched.client import NotFoundError, VertexError

        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window)
        watch = JobWatch(self.job_name, self.transient_error_window, observed_restarts=self.observed_restarts)
        while True:
            try:
                job = await client.get_custom_job(self.job_name)
            except NotFoundError as exc:
                yield TriggerEvent(error_event(f"{self.job_name} no longer exists: {exc}", self.job_name))
                return
            except VertexError as exc:  # already retried briefly by the client
                if watch.failed_poll(exc):
                    self.log.warning("poll of %s failed, retrying: %s", self.job_name, exc)
                    await asyncio.sleep(self.poll_interval)
                    continue
                yield TriggerEvent(error_event(watch.unreachable_message(exc), self.job_name))
                return
            line = watch.observe(job)
            if line:
                self.log.info(line)
            if job.is_terminal():
                yield TriggerEvent(event_for_job(job, watch.observed_restarts))
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """A user marked the task failed/success or cleared it: cancel the job (never on a
        triggerer restart or redistribution; that is ``cleanup``, which we leave alone)."""
        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window)
        self.log.info("task killed by a user: cancelling %s", self.job_name)
        await asyncio.wait_for(cancel_quietly(client, self.job_name), ON_KILL_TIMEOUT)


async def cancel_quietly(client: Any, job_name: str) -> bool:
    """Cancel; a job that already ended (400 FAILED_PRECONDITION) is not an error."""
    from airflow_gpu_sched.client import InvalidArgumentError

    try:
        await client.cancel_custom_job(job_name)
        return True
    except InvalidArgumentError:
        return False
