"""Wait for a Vertex AI training job (custom job, tuning job or training pipeline) to finish,
in the triggerer's event loop.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.orchestration.event_fields import public_resource
from airflow_gpu_sched.orchestration.job_types import job_type_of
from airflow_gpu_sched.orchestration.outcomes import PAUSED_MESSAGE, Event, cancel_ended, error_event
from airflow_gpu_sched.orchestration.stops import cancelled_here, note_cancel
from airflow_gpu_sched.orchestration.watch import TRANSIENT_ERROR_WINDOW, JobWatch, has_run, past_running_bound
from airflow_gpu_sched.triggers import got_capacity
from airflow_gpu_sched.vertex import service_clock
from airflow_gpu_sched.vertex.enums import JobState

ON_KILL_TIMEOUT = 30.0  # the triggerer bounds on_kill too (``[triggerer] on_kill_timeout``, 30 s)
ON_KILL_CANCEL_BUDGET = 20.0  # a cancel answered 429/5xx is retried this long, inside that bound
CANCEL_SETTLE = 120.0  # after the bound's cancel, how long (service seconds) to follow the job to its end
_TIMED_OUT = object()


def location_of(resource_name: str) -> str:
    from airflow_gpu_sched.vertex import resource_names

    return resource_names.location(resource_name)


async def async_client(resource_name: str, gcp_conn_id: str, poll_interval: float, window: float,
                       impersonation_chain: str | list[str] | None = None):
    """One async client per call site; its httpx pool is shared by every trigger in the loop."""
    from airflow_gpu_sched.vertex.client import AsyncVertexClient, RetryPolicy

    # One poll retries briefly on its own; the longer transient-error window is the watch's.
    deadline = min(max(10.0, poll_interval), window)
    retry = RetryPolicy(initial=min(1.0, poll_interval), maximum=10.0, deadline=deadline)
    # the job's own project (its name's), not the connection's: a connection without a project
    # (the operator's project_id given instead) left the shared poller's lists without one (issue 41)
    return await AsyncVertexClient.afrom_connection(gcp_conn_id, location=location_of(resource_name), retry=retry,
                                                    impersonation_chain=impersonation_chain,
                                                    project=resource_name.split("/")[1])


BATCHED, PER_JOB = "batched", "per_job"


class CustomJobTrigger(BaseTrigger):
    """Waits for one job (of any job type: its resource name says which); yields one event (``succeeded``, ``failed``, ``cancelled``,
    ``preempted``, ``capacity_timeout``, ``quota_exceeded`` or ``error``) when it ends or the API stays unreachable.

    ``polling="batched"`` (default): the job is watched by the loop's shared poller
    (:mod:`.poller`: one paged list per interval for all jobs of a connection and region);
    ``"per_job"``: this trigger GETs its own job every ``poll_interval``.

    ``running_by`` (epoch seconds of the service's time, vertex/service_clock.py, so it holds across
    triggerer restarts and counts as ``max_wait_duration`` does; None: no bound): the
    operator's bound on the time before RUNNING. A job that has never been RUNNING by then
    (QUEUED for quota or capacity, PENDING) is cancelled, followed to its end, and reported as
    ``capacity_timeout`` with ``running_bound`` (``bound_reason``, the why) in the payload.
    Only the time before the *first* RUNNING this trigger saw counts (never ``startTime``, which
    real Vertex sets at admission): later SPOT restarts are the preemption budget's business.
    Every event about the job carries ``observed``: each state change as first seen
    (:mod:`~airflow_gpu_sched.orchestration.state_times`).
    """

    def __init__(self, job_name: str, gcp_conn_id: str = "google_cloud_default", poll_interval: float = 30.0,
                 transient_error_window: float = TRANSIENT_ERROR_WINDOW, observed_restarts: int = 0,
                 polling: str = BATCHED, running_by: float | None = None, bound_reason: str | None = None,
                 impersonation_chain: str | list[str] | None = None, stream_logs: bool = False,
                 log_lines_per_minute: int | None = None, observed: dict[str, Any] | None = None,
                 masked: list[Any] | None = None):
        super().__init__()
        if polling not in (BATCHED, PER_JOB):
            raise ValueError(f"polling must be {BATCHED!r} or {PER_JOB!r} (got {polling!r})")
        self.job_name = job_name
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.observed_restarts = int(observed_restarts)
        self.polling = polling
        self.running_by = None if running_by is None else float(running_by)
        self.bound_reason = bound_reason
        self.impersonation_chain = list(impersonation_chain) if isinstance(impersonation_chain, (list, tuple)) \
            else impersonation_chain  # serializable as is
        self.stream_logs = bool(stream_logs)  # tail the job's Cloud Logging lines into the task log
        self.log_lines_per_minute = None if log_lines_per_minute is None else int(log_lines_per_minute)
        self._cancel_note = ""
        self.job_type = job_type_of(job_name)
        self.observed = observed  # the states an earlier watch saw (a race's): go on from them
        # where in the job's spec the worker's masker cut (places, never texts: triggers/job_secrets.py)
        self.masked = [[list(path), int(start), int(end)] for path, start, end in masked] if masked else None
        self._logged_states: dict[str, Any] = {}  # state -> first time Vertex's log entries gave

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "gcp_conn_id": self.gcp_conn_id, "poll_interval": self.poll_interval,
            "transient_error_window": self.transient_error_window, "observed_restarts": self.observed_restarts,
            "polling": self.polling, "running_by": self.running_by, "bound_reason": self.bound_reason,
            "impersonation_chain": self.impersonation_chain, "stream_logs": self.stream_logs,
            "log_lines_per_minute": self.log_lines_per_minute, "observed": self.observed,
            **({"masked": self.masked} if self.masked is not None else {}),  # as an older version stored it
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_gpu_sched.triggers.settle import settle, started_at

        from airflow_gpu_sched.triggers.ownership import claim, fired

        started = started_at(self)  # in a triggerer: the event waits for the deferral to settle
        await claim(self)  # on_kill tells a hand-over to another triggerer from a user's kill by it
        logs = self._log_stream() if self.stream_logs else None
        if logs is not None:
            await logs.start()
        news = self._news()
        try:
            event = await self._first_event(news)
        except BaseException:  # cancelled (a triggerer restart, on_kill) or failed: stop the tail too
            if logs is not None:
                logs.stop()
            raise
        finally:
            await news.aclose()  # leave the shared poller now, not when the generator is collected
        if logs is not None:
            await logs.finish()  # the job's last lines (its exit, a traceback) before the event
            from airflow_gpu_sched.triggers.job_secrets import cut_event

            event = cut_event(event, logs.redact)  # Vertex's error may quote the job's output
            if isinstance(event.get("observed"), dict):
                from airflow_gpu_sched.orchestration import state_times

                for state, when in self._logged_states.items():  # exact times from Vertex's log entries
                    state_times.refine(event["observed"], state, when)
        await settle(started)  # apache/airflow#66374: not before the scheduler saw the deferring try exit
        await fired(self)  # a late copy of this trigger elsewhere must not take the resume for a kill
        yield TriggerEvent(event)

    def note_logged_state(self, state: str, timestamp: str) -> None:
        """A Vertex log entry said the job entered ``state`` at ``timestamp``: keep the first."""
        from airflow_gpu_sched.orchestration import state_times

        try:
            when = state_times.parse_timestamp(timestamp)
        except ValueError:
            return
        if state not in self._logged_states or when < self._logged_states[state]:
            self._logged_states[state] = when

    def _log_stream(self) -> Any:
        from airflow_gpu_sched.triggers.log_tail import JobLogStream

        chain = self.impersonation_chain
        key = (self.gcp_conn_id, tuple(chain) if isinstance(chain, list) else chain, self.job_name.split("/")[1])
        return JobLogStream(self, self.job_name, lambda: async_client(
            self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window, chain),
            key, self.poll_interval, self.log_lines_per_minute)

    async def _first_event(self, news: AsyncIterator[Any]) -> dict[str, Any]:
        from airflow_gpu_sched.vertex.client import NotFoundError

        watch = JobWatch(self.job_name, self.transient_error_window, observed_restarts=self.observed_restarts)
        if isinstance(self.observed, dict) and isinstance(self.observed.get("seen"), dict):
            watch.times = copy.deepcopy(self.observed)
        stream = _Stream(news)
        started = paused = False
        cancelled_at: float | None = None  # when the bound's (or a PAUSED job's) cancel went out
        look_at = self.running_by  # when to look at the job if no news came by then (service time)
        last: Any = None  # the resource as last polled
        try:
            while True:
                item = await stream.next(None if started and cancelled_at is None else look_at, self.poll_interval)
                if item is _TIMED_OUT and look_at is not None and service_clock.now() < look_at:
                    continue  # woke a poll interval on, short of the service's time to look: wait on
                if item is _TIMED_OUT:  # no news by the bound (or the settle time): look at the job now
                    # a pipeline/tuning job RUNNING whose job waits: the poller tells no news of that job
                    reread = last is not None and self.job_type.needs_capacity_read(last, watch.times)
                    item = last if reread else await self._get_now()
                    look_at = a_poll_later(self.poll_interval)  # and again a poll later, not at once
                capacity = None
                if not isinstance(item, Exception):
                    read = await got_capacity.read(self.job_type, item, watch.times, self._client)
                    item, capacity = read if isinstance(read, tuple) else (read, None)
                if isinstance(item, NotFoundError):
                    return error_event(f"{self.job_name} no longer exists: {item}", self.job_name)
                if isinstance(item, Exception):  # the poll failed after the client's brief retries
                    if watch.failed_poll(item):
                        self.log.warning("poll of %s failed, retrying: %s", self.job_name, item)
                        continue
                    return error_event(watch.unreachable_message(item), self.job_name)
                last = item
                view = self.job_type.view(item, capacity)
                line = watch.observe(view)
                if line:
                    self.log.info(line)
                if capacity is not None and self.job_type.needs_capacity_read(item, watch.times):
                    look_at = min(look_at or math.inf, a_poll_later(self.poll_interval))  # read its job again
                if cancelled_at is not None:
                    if view.is_terminal() and not cancel_ended(view, watch.times):
                        # it ended otherwise first (SUCCEEDED: it ran after all, and its output is used)
                        return self.job_type.event(item, watch.observed_restarts, watch.times, ours=True)
                    if view.is_terminal() or service_clock.now() >= cancelled_at + CANCEL_SETTLE:
                        if paused:
                            return self._paused_event(item, view, watch.observed_restarts, watch.times)
                        return self._bound_event(item, view, watch.observed_restarts, watch.times)
                    continue
                if view.is_terminal():  # a cancel this process sent (on_kill) makes the end ours
                    return self.job_type.event(item, watch.observed_restarts, watch.times,
                                               ours=cancelled_here(self.job_name))
                started = started or has_run(view, watch.times)
                paused = view.state is JobState.JOB_STATE_PAUSED  # Google's SDKs: "complete"; we: cancel, fail
                if paused or past_running_bound(view, watch.times, self.running_by, service_clock.now()):
                    error = await self._cancel_for_bound(view, PAUSED_MESSAGE if paused else None)
                    if error is not None:
                        return error
                    cancelled_at = service_clock.now()
                    look_at = cancelled_at + CANCEL_SETTLE
        finally:
            await stream.close()
        raise RuntimeError("unreachable")  # pragma: no cover

    def _bound_message(self, view: Any) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.running_by or 0))
        state = view.state.value if view.state else "?"
        why = self.bound_reason or "the bound on the time before RUNNING"
        return (f"{self.job_name} was not RUNNING by {when} ({why}): still {state} (waiting for quota or "
                "capacity) when the bound passed; cancelled it")

    async def _cancel_for_bound(self, view: Any, note: str | None = None) -> dict[str, Any] | None:
        """Cancel a job past the bound (or PAUSED: ``note``); an error event when the cancel cannot
        be sent (the job would stay queued unwatched: the operator fails and a retry re-attaches
        and cancels)."""
        from airflow_gpu_sched.vertex.client import VertexError

        self._cancel_note = f"{self.job_name}: {note}" if note else self._bound_message(view)
        self.log.warning(self._cancel_note)
        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                    self.impersonation_chain)
        try:
            await cancel_quietly(client, self.job_name)
        except VertexError as exc:
            return error_event(f"cancelling {self.job_name} past its bound failed: {exc}", self.job_name)
        return None

    def _bound_event(self, item: Any, view: Any, restarts: int, times: dict[str, Any]) -> dict[str, Any]:
        """The capacity outcome of the bound: the job as last seen (CANCELLED, or still CANCELLING)."""
        payload: dict[str, Any] = {"status": Event.CAPACITY_TIMEOUT.value, "job": public_resource(view),
                                   "observed_restarts": restarts, "message": self._cancel_note,
                                   "running_bound": self.bound_reason or "running_by", "observed": times}
        if item is not view:  # a tuning job or a pipeline: the operator reads the resource itself
            payload["resource"] = public_resource(item)
        return payload

    def _paused_event(self, item: Any, view: Any, restarts: int, times: dict[str, Any]) -> dict[str, Any]:
        """A job seen PAUSED, cancelled: the try fails (never retried) with :data:`PAUSED_MESSAGE`."""
        payload = {**self._bound_event(item, view, restarts, times), "status": Event.FAILED.value, "paused": True}
        del payload["running_bound"]
        return payload

    async def _client(self) -> Any:
        return await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                  self.impersonation_chain)

    async def _get_now(self) -> Any:
        """One GET of the job (the shared poller tells only of changes), or the error of the call."""
        from airflow_gpu_sched.vertex.client import VertexError

        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                    self.impersonation_chain)
        try:
            return await self.job_type.get(client, self.job_name)
        except VertexError as exc:
            return exc

    async def _news(self) -> AsyncIterator[Any]:
        """The job as polled (a resource of the job type), or the error of a failed poll, one after another."""
        from airflow_gpu_sched.vertex.client import VertexError

        if self.polling == BATCHED:
            from airflow_gpu_sched.triggers.poller import shared_poller

            chain = self.impersonation_chain
            identity = tuple(chain) if isinstance(chain, list) else chain  # another identity, another poller
            key = (self.gcp_conn_id, identity, self.job_name.split("/")[1], location_of(self.job_name))
            poller = shared_poller(key, lambda: async_client(self.job_name, self.gcp_conn_id, self.poll_interval,
                                                             self.transient_error_window, self.impersonation_chain),
                                   self.job_type)
            watcher = poller.watch(self.job_name, self.poll_interval)
            try:
                while True:
                    yield await watcher.next()
            finally:  # cancelled, finished, or moved to another triggerer: leave cleanly
                poller.unwatch(watcher)
        client = await async_client(self.job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                    self.impersonation_chain)
        while True:
            try:
                yield await self.job_type.get(client, self.job_name)
            except VertexError as exc:
                yield exc
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """A user marked the task failed/success or cleared it: cancel the job (never on a
        triggerer restart; that is ``cleanup``, which we leave alone). Airflow 3.3 calls on_kill
        on a hand-over to another triggerer too (apache/airflow#73454): then the job is left to
        the copy that now watches it; and on a copy cancelled by the resume of this trigger's own
        event, fired by another copy (triggers/ownership.py): left to the resumed task."""
        from airflow_gpu_sched.triggers.ownership import handed_over

        if await handed_over(self):
            self.log.warning("this trigger was handed to another triggerer, or a copy of it fired already "
                             "(apache/airflow#73454), not killed by a user: leaving %s to the copy that watches "
                             "it now, or to the task its event resumed", self.job_name)
            return
        self.log.info("task killed by a user: cancelling %s", self.job_name)
        await cancel_on_kill(self.log, self.job_name, self.gcp_conn_id, self.impersonation_chain)


async def cancel_on_kill(log: Any, job_name: str, gcp_conn_id: str,
                         impersonation_chain: str | list[str] | None = None) -> bool:
    """Cancel for a user's kill: a 429/5xx or a lost connection is retried (backoff) for up to
    :data:`ON_KILL_CANCEL_BUDGET` s, never handed back to Airflow as a bare traceback: a cancel
    that could not be sent is logged as an error naming the job left running (True: cancelled
    or already ended)."""
    from airflow_gpu_sched.vertex.client import AsyncVertexClient, RetryPolicy, VertexError

    retry = RetryPolicy(initial=0.5, maximum=4.0, deadline=ON_KILL_CANCEL_BUDGET)
    try:
        client = await AsyncVertexClient.afrom_connection(gcp_conn_id, location=location_of(job_name), retry=retry,
                                                          impersonation_chain=impersonation_chain)
        await asyncio.wait_for(cancel_quietly(client, job_name), ON_KILL_TIMEOUT)
    except (VertexError, TimeoutError) as exc:
        log.error("could not cancel %s (retried for %.0f s): %s. The job may still be running: cancel it in the "
                  "console or with `airflow gpu-sched jobs orphans --cancel`", job_name, ON_KILL_CANCEL_BUDGET, exc)
        return False
    return True


def a_poll_later(poll_interval: float) -> float:
    """The service's time a poll interval (real seconds) from now."""
    return service_clock.now() + service_clock.service_seconds(poll_interval)


class _Stream:
    """The news stream, read with an optional wake-up at a service-time instant (slept in real
    seconds, at most ``cap``: the caller looks at the clock again on waking): a read that times
    out keeps its pending ``__anext__`` for the next call, so nothing the poller sends is lost."""

    def __init__(self, news: AsyncIterator[Any]):
        self._news = news
        self._pending: asyncio.Future | None = None

    async def next(self, wake: float | None, cap: float | None = None) -> Any:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._news.__anext__())
        timeout = None if wake is None else service_clock.real_seconds_until(wake, cap)
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            return _TIMED_OUT
        pending, self._pending = self._pending, None
        return pending.result()

    async def close(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await self._pending
        self._pending = None


async def cancel_quietly(client: Any, job_name: str) -> bool:
    """Cancel; a job that already ended (400 FAILED_PRECONDITION) is not an error."""
    from airflow_gpu_sched.vertex.client import InvalidArgumentError

    note_cancel(job_name)  # before it is sent: its CANCELLED is ours (orchestration/stops.py)
    try:
        await job_type_of(job_name).cancel(client, job_name)
        return True
    except InvalidArgumentError:
        return False
