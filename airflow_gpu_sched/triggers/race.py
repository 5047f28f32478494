"""Wait for every member of a hedged race at once, in the triggerer's event loop: one trigger,
each member watched through the shared poller of its region (:mod:`.poller`), exactly as a
:class:`~airflow_gpu_sched.triggers.job.CustomJobTrigger` watches one job.

The winner rule is :func:`race_engine.race_verdict`'s (pure): the first member seen RUNNING
(or SUCCEEDED) in member order, never by ``startTime``; one CANCELLING or CANCELLED never wins,
so after a triggerer restart the members this trigger already cancelled stay lost. This trigger
does the I/O: it watches, builds what it saw (:meth:`RaceTrigger.members_seen`), cancels what
the verdict says at once and follows those to their end (at most :data:`CANCEL_SETTLE`), so
that their queued and run times are final when the operator records them; then one event:

- ``{"status": "race_won", "winner": i, "members": [...]}``;
- ``{"status": "race_ended", "winner": null, "members": [...]}``: every member ended without
  running (capacity outcomes, cancels), or one failed for its code (the others cancelled);
- ``{"status": "error", "message": ...}``: the API stayed unreachable past the window.

Each member: ``{"index", "job_name", "job": the job as last seen, "event": its job event
(:func:`outcomes.event_for_job`'s payload) once it ended, else null, "by_race": cancelled by
this race as a loser}``. A member past its own bound before RUNNING (``running_by``) is
cancelled and ends as ``capacity_timeout`` with ``running_bound``, as a single job's trigger
does. ``on_kill`` (a user cleared or failed the task) cancels every member; a triggerer restart
cancels nothing and, from the serialized members, watches all of them again.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.orchestration.event_fields import public_resource
from airflow_gpu_sched.orchestration.outcomes import PAUSED_MESSAGE, Event, cancel_ended, error_event
from airflow_gpu_sched.orchestration.stops import cancelled_here
from airflow_gpu_sched.orchestration.race_engine import MemberSeen, race_verdict
from airflow_gpu_sched.orchestration.watch import TRANSIENT_ERROR_WINDOW, JobWatch, has_run, past_running_bound
from airflow_gpu_sched.triggers import got_capacity
from airflow_gpu_sched.triggers.job import BATCHED, CANCEL_SETTLE, CustomJobTrigger, a_poll_later, cancel_quietly
from airflow_gpu_sched.vertex import service_clock
from airflow_gpu_sched.vertex.enums import JobState

RACE_WON, RACE_ENDED = "race_won", "race_ended"


class RaceTrigger(BaseTrigger):
    """Waits for the members ``job_names`` (by member index ``indices``) of one race."""

    def __init__(self, job_names: list[str], indices: list[int] | None = None,
                 gcp_conn_id: str = "google_cloud_default", poll_interval: float = 30.0,
                 transient_error_window: float = TRANSIENT_ERROR_WINDOW, running_by: list[float | None] | None = None,
                 bound_reasons: list[str | None] | None = None, polling: str = BATCHED,
                 impersonation_chain: str | list[str] | None = None):
        super().__init__()
        if len(job_names) < 1:
            raise ValueError("a race trigger watches at least one member")
        self.job_names = list(job_names)
        self.indices = list(indices) if indices is not None else list(range(len(job_names)))
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.running_by = [None if b is None else float(b) for b in (running_by or [None] * len(job_names))]
        self.bound_reasons = list(bound_reasons or [None] * len(job_names))
        self.polling = polling
        self.impersonation_chain = list(impersonation_chain) if isinstance(impersonation_chain, (list, tuple)) \
            else impersonation_chain
        # one single-job trigger per member: its news (shared poller), its GET, its job type
        self._members = [CustomJobTrigger(name, gcp_conn_id, poll_interval, transient_error_window, polling=polling,
                                          running_by=by, bound_reason=why, impersonation_chain=impersonation_chain)
                         for name, by, why in zip(self.job_names, self.running_by, self.bound_reasons)]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_names": self.job_names, "indices": self.indices, "gcp_conn_id": self.gcp_conn_id,
            "poll_interval": self.poll_interval, "transient_error_window": self.transient_error_window,
            "running_by": self.running_by, "bound_reasons": self.bound_reasons, "polling": self.polling,
            "impersonation_chain": self.impersonation_chain,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_gpu_sched.triggers.settle import settle, started_at

        from airflow_gpu_sched.triggers.ownership import claim, fired

        started = started_at(self)  # in a triggerer: the event waits for the deferral to settle
        await claim(self)  # on_kill tells a hand-over to another triggerer from a user's kill by it
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        streams = [member._news() for member in self._members]
        tasks = [asyncio.ensure_future(self._pump(slot, stream, queue)) for slot, stream in enumerate(streams)]
        try:
            event = await self._decide(queue)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task
            for stream in streams:
                await stream.aclose()  # leave the shared pollers now
        # apache/airflow#66374: a race re-attached to members already ended decides at once
        await settle(started)
        await fired(self)  # a late copy's on_kill must not cancel the winner the resumed task goes on with
        yield TriggerEvent(event)

    @staticmethod
    async def _pump(slot: int, stream: AsyncIterator[Any], queue: asyncio.Queue) -> None:
        async for item in stream:
            queue.put_nowait((slot, item))

    async def _decide(self, queue: asyncio.Queue) -> dict[str, Any]:
        from airflow_gpu_sched.vertex.client import NotFoundError

        n = len(self._members)
        watches = [JobWatch(name, self.transient_error_window) for name in self.job_names]
        seen: list[Any] = [None] * n  # the latest resource of each member
        self._capacity = [None] * n  # the custom job holding a RUNNING pipeline's/tuning job's GPUs, as read
        by_race: set[int] = set()
        bounded: dict[int, str] = {}  # slot -> the bound's cancel note
        winner: int | None = None
        decided_at: float | None = None
        while True:
            wake = self._wake(seen, bounded, decided_at, watches)  # in the service's time (service_clock.py)
            try:
                news = [await asyncio.wait_for(queue.get(), None if wake is None else
                                               service_clock.real_seconds_until(wake, self.poll_interval))]
            except asyncio.TimeoutError:  # no news by a bound (or the settle time): look at the members now
                if service_clock.now() < wake:
                    continue  # woke a poll interval on, short of the service's time to look: wait on
                news = []
                for s in range(n):
                    if seen[s] is None or not self._view(s, seen[s]).is_terminal():
                        member = self._members[s]
                        reread = seen[s] is not None and member.job_type.needs_capacity_read(seen[s], watches[s].times)
                        got = seen[s] if reread else await member._get_now()
                        if not isinstance(got, Exception):
                            got = await self._read_capacity(s, got, watches[s].times)
                        if not isinstance(got, Exception):
                            watches[s].observe(self._view(s, got))
                            seen[s] = got
            else:
                # one poll tells every watcher of its region at once: let their pumps run, then take
                # all that came, so that members seen RUNNING in one poll are decided together
                for _ in range(3):
                    await asyncio.sleep(0)
                while not queue.empty():
                    news.append(queue.get_nowait())
            for slot, item in news:
                if isinstance(item, NotFoundError):
                    return error_event(f"{self.job_names[slot]} no longer exists: {item}", self.job_names[slot])
                if not isinstance(item, Exception):
                    item = await self._read_capacity(slot, item, watches[slot].times)
                if isinstance(item, Exception):
                    if watches[slot].failed_poll(item):
                        self.log.warning("poll of %s failed, retrying: %s", self.job_names[slot], item)
                        continue
                    return error_event(watches[slot].unreachable_message(item), self.job_names[slot])
                line = watches[slot].observe(self._view(slot, item))
                if line:
                    self.log.info(line)
                seen[slot] = item
            if decided_at is None:
                for s in range(n):  # each member's own bound before RUNNING; a PAUSED one at once
                    if s in bounded or seen[s] is None:
                        continue
                    view = self._view(s, seen[s])
                    if view.state is JobState.JOB_STATE_PAUSED:
                        bounded[s] = await self._cancel(s, "paused")
                    elif past_running_bound(view, watches[s].times, self.running_by[s], service_clock.now()):
                        bounded[s] = await self._cancel(s, "bound", seen[s])
                winner, to_cancel = race_verdict(self.members_seen(seen, bounded, watches), bounded)
                if to_cancel is not None:  # decided: the others, at once
                    for s in to_cancel:
                        await self._cancel(s, "lost")
                        by_race.add(s)
                    decided_at = service_clock.now()
            others_done = all(seen[s] is not None and self._view(s, seen[s]).is_terminal()
                              for s in range(n) if s != winner)
            settled = decided_at is not None and service_clock.now() >= decided_at + CANCEL_SETTLE
            if others_done or settled:
                return self._event(seen, winner, by_race, bounded, watches)

    def _view(self, slot: int, item: Any) -> Any:
        capacity = getattr(self, "_capacity", None)
        return self._members[slot].job_type.view(item, capacity[slot] if capacity else None)

    async def _read_capacity(self, slot: int, item: Any, times: dict[str, Any]) -> Any:
        """The member as polled, its GPUs' custom job read when it says RUNNING (got_capacity.py);
        or the error of that read."""
        read = await got_capacity.read(self._members[slot].job_type, item, times, self._members[slot]._client)
        if isinstance(read, Exception):
            return read
        item, self._capacity[slot] = read
        return item

    def _kind(self, slot: int, item: Any, times: dict[str, Any] | None = None, ours: bool = False) -> Event | None:
        from airflow_gpu_sched.orchestration.outcomes import event_kind

        return event_kind(self._view(slot, item), times, ours)

    def members_seen(self, seen: list[Any], bounded: dict[int, str] | set[int],
                     watches: list[JobWatch]) -> list[MemberSeen | None]:
        """Each member as last seen, for :func:`race_verdict` (None: not seen yet)."""
        out: list[MemberSeen | None] = []
        for slot, item in enumerate(seen):
            if item is None:
                out.append(None)
                continue
            view = self._view(slot, item)
            out.append(MemberSeen(index=self.indices[slot], state=view.state.value if view.state else "",
                                  ran=has_run(view, watches[slot].times), terminal=view.is_terminal(),
                                  failed=self._kind(slot, item, watches[slot].times,
                                                    slot in bounded or cancelled_here(self.job_names[slot]))
                                  is Event.FAILED))
        return out

    def _wake(self, seen: list[Any], bounded: dict[int, str], decided_at: float | None,
              watches: list[JobWatch]) -> float | None:
        if decided_at is not None:
            return decided_at + CANCEL_SETTLE
        bounds = [by for slot, by in enumerate(self.running_by)
                  if by is not None and slot not in bounded and not (
                      seen[slot] is not None and has_run(self._view(slot, seen[slot]), watches[slot].times))]
        if any(item is not None and slot not in bounded and self._members[slot].job_type.needs_capacity_read(
                item, watches[slot].times) for slot, item in enumerate(seen)):
            bounds.append(a_poll_later(self.poll_interval))  # its job's RUNNING comes as no news of its own
        if not bounds:
            return None
        soonest = min(bounds)
        return soonest if soonest > service_clock.now() else a_poll_later(self.poll_interval)

    async def _cancel(self, slot: int, why: str, item: Any = None) -> str:
        from airflow_gpu_sched.triggers.job import async_client
        from airflow_gpu_sched.vertex.client import VertexError

        name = self.job_names[slot]
        if why == "bound":
            note = self._members[slot]._bound_message(self._view(slot, item))
            self.log.warning(note)
        elif why == "paused":
            note = f"{name}: {PAUSED_MESSAGE}"
            self.log.warning(note)
        else:
            note = f"{name} lost the race: cancelled"
            self.log.info(note)
        client = await async_client(name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                    self.impersonation_chain)
        try:
            await cancel_quietly(client, name)
        except VertexError as exc:  # the operator records it as seen; a retry re-attaches and cancels
            self.log.warning("cancelling %s failed: %s", name, exc)
        return note

    def _event(self, seen: list[Any], winner: int | None, by_race: set[int], bounded: dict[int, str],
               watches: list[JobWatch]) -> dict[str, Any]:
        members = []
        for slot, item in enumerate(seen):
            member: dict[str, Any] = {"index": self.indices[slot], "job_name": self.job_names[slot],
                                      "job": None, "event": None, "by_race": slot in by_race,
                                      "observed": watches[slot].times}  # the states seen (state_times)
            if item is not None:
                view = self._view(slot, item)
                member["job"] = public_resource(view)
                if view.is_terminal():
                    event = self._members[slot].job_type.event(item, watches[slot].observed_restarts,
                                                               watches[slot].times, slot in by_race or slot in bounded
                                                               or cancelled_here(self.job_names[slot]))
                    if slot in bounded and cancel_ended(view, watches[slot].times):  # CANCELLED, or FAILED by it
                        event = {**event, "status": Event.CAPACITY_TIMEOUT.value, "message": bounded[slot],
                                 "running_bound": self.bound_reasons[slot] or "running_by"}
                    member["event"] = event
            members.append(member)
        status = RACE_WON if winner is not None else RACE_ENDED
        return {"status": status, "winner": None if winner is None else self.indices[winner], "members": members}

    async def on_kill(self) -> None:
        """A user marked the task failed/success or cleared it: cancel every member, at once (each
        cancel retried within the one on_kill budget). A hand-over to another triggerer
        (apache/airflow#73454) cancels nothing: the copy that now watches the race goes on; nor
        does a copy cancelled by the resume of the race's own event (its winner RUNS)."""
        from airflow_gpu_sched.triggers.job import cancel_on_kill
        from airflow_gpu_sched.triggers.ownership import handed_over

        if await handed_over(self):
            self.log.warning("this trigger was handed to another triggerer, or a copy of it fired already "
                             "(apache/airflow#73454), not killed by a user: leaving the race's members to the "
                             "copy that watches them now, or to the task its event resumed")
            return
        self.log.info("task killed by a user: cancelling every race member: %s", ", ".join(self.job_names))
        await asyncio.gather(*(cancel_on_kill(self.log, name, self.gcp_conn_id, self.impersonation_chain)
                               for name in self.job_names))
