"""Wait for a Vertex AI training job (custom job, tuning job or training pipeline) to finish,
in the triggerer's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.job_types import job_type_of
from airflow_gpu_sched.outcomes import error_event
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


BATCHED, PER_JOB = "batched", "per_job"


class CustomJobTrigger(BaseTrigger):
    """Waits for one job (of any job type: its resource name says which); yields one event (``succeeded``, ``failed``, ``cancelled``,
    ``preempted``, ``capacity_timeout`` or ``error``) when it ends or the API stays unreachable.

    ``polling="batched"`` (default): the job is watched by the loop's shared poller
    (:mod:`.poller`: one paged list per interval for all jobs of a connection and region);
    ``"per_job"``: this trigger GETs its own job every ``poll_interval``.
    """

    def __init__(self, job_name: str, gcp_conn_id: str = "google_cloud_default", poll_interval: float = 30.0,
                 transient_error_window: float = TRANSIENT_ERROR_WINDOW, observed_restarts: int = 0,
                 polling: str = BATCHED):
        super().__init__()
        if polling not in (BATCHED, PER_JOB):
            raise ValueError(f"polling must be {BATCHED!r} or {PER_JOB!r} (got {polling!r})")
        self.job_name = job_name
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.observed_restarts = int(observed_restarts)
        self.polling = polling
        self.job_type = job_type_of(job_name)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "gcp_conn_id": self.gcp_conn_id, "poll_interval": self.poll_interval,
            "transient_error_window": self.transient_error_window, "observed_restarts": self.observed_restarts,
            "polling": self.polling,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        news = self._news()
        try:
            event = await self._first_event(news)
        finally:
            await news.aclose()  # leave the shared poller now, not when the generator is collected
        yield TriggerEvent(event)

    async def _first_event(self, news: AsyncIterator[Any]) -> dict[str, Any]:
        from airflow_gpu_sched.client import NotFoundError

        watch = JobWatch(self.job_name, self.transient_error_window, observed_restarts=self.observed_restarts)
        async for item in news:
            if isinstance(item, NotFoundError):
                return error_event(f"{self.job_name} no longer exists: {item}", self.job_name)
            if isinstance(item, Exception):  # the poll failed after the client's brief retries
                if watch.failed_poll(item):
                    self.log.warning("poll of %s failed, retrying: %s", self.job_name, item)
                    continue
                return error_event(watch.unreachable_message(item), self.job_name)
            view = self.job_type.view(item)
            line = watch.observe(view)
            if line:
                self.log.info(line)
            if view.is_terminal():
                return self.job_type.event(item, watch.observed_restarts)
        raise RuntimeError("the poll stream ended")  # never: both streams are endless

    async def _news(self) -> AsyncIterator[Any]:
        """The job as polled (a resource of the job type), or the error of a failed poll, one after another."""
        from airflow_gpu_sched.client import VertexError

        if self.polling == BATCHED:
            from airflow_gpu_sched.triggers.poller import shared_poller

            key = (self.gcp_conn_id, self.job_name.split("/")[1], location_of(self.job_name))
            poller = shared_poller(key, lambda: async_client(self.job_name, self.gcp_conn_id, self.poll_interval,
                                                             self.transient_error_window), self.job_type)
            watcher = poller.watch(self.job_name, self.poll_interval)
            try:
                while True:
                    yield await watcher.next()
            finally:  # cancelled, finished, or moved to another triggerer: leave cleanly
                poller.unwatch(watcher)
        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window)
        while True:
            try:
                yield await self.job_type.get(client, self.job_name)
            except VertexError as exc:
                yield exc
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
        await job_type_of(job_name).cancel(client, job_name)
        return True
    except InvalidArgumentError:
        return False
