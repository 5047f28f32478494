"""One poller per (connection, project, location, job type) in a triggerer's event loop, shared
by every :class:`CustomJobTrigger` of this package there.

Vertex allows about 600 get/list requests per minute per project and region. Polling each job
with its own GET every 10 s spends that budget at 100 jobs. The shared poller instead, once per
interval, using only the filter fields Google documents for these lists (``display_name``,
``state``, ``create_time``, ``labels``; there is no ``update_time``):

1. lists this package's active jobs: paged list calls on the job type's collection
   (``customJobs``, ...) with the filter ``labels.managed-by="airflow-gpu-sched" AND
   create_time>="<oldest watched - margin>" AND NOT (<terminal states>)`` (the create_time bound
   once every watched job's createTime is known) and a ``readMask`` of what a trigger reads while
   it waits (:data:`~airflow_gpu_sched.orchestration.job_types.WATCH_FIELDS`);
2. a watched job missing from that list has ended (or carries no label): with at most
   :data:`FEW_MISSING` of them it GETs each; with more, ONE paged list of our ended jobs created
   between the oldest and the newest missing one (``create_time`` bounds, the terminal states,
   the mask of what the final event carries), then GETs any still missing.

3. at most once per ``[gpu_sched] reaper_interval``, the reaper's pass (:mod:`.reaper`): one
   paged list of our active jobs in the region, and a cancel for each job no live try owns.

Every final event comes from a GET or that list of ended jobs, never from the list of active
ones (a terminal job found there is treated as missing), so the final event carries what the
operator reads. Then only the triggers whose job changed wake. A 429 or 5xx backs off the whole
poller (every watcher is told, and keeps its own transient-error window); the poller task ends
when its last watcher leaves; a trigger that is cancelled or moved to another triggerer leaves
in ``finally``. Nothing blocks the loop: all I/O is the async client's.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB, JobType
from airflow_gpu_sched.orchestration.ledger import MANAGED_LABEL, MANAGED_VALUE
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp

log = logging.getLogger(__name__)

# "`labels` supports general map functions that is: `labels.key=value` - key:value equality"
# (ListCustomJobsRequest.filter in google/cloud/aiplatform/v1/job_service.proto; the same words in
# ListHyperparameterTuningJobsRequest and pipeline_service.proto's ListTrainingPipelinesRequest)
OURS = f'labels.{MANAGED_LABEL}="{MANAGED_VALUE}"'
CLOCK_MARGIN = timedelta(seconds=2)  # slack on the create_time bounds (timestamp precision)
FEW_MISSING = 3  # up to this many ended jobs in one interval: a GET each; more: one list of ended jobs
PAGE_SIZE = 500
MAX_BACKOFF = 120.0
JITTER = 0.1  # share of the interval added at random, so pollers in many triggerers drift apart


class Watcher:
    """A trigger's mailbox: the latest news about its job (the resource, or the poll's error)."""

    def __init__(self, job_name: str, interval: float):
        self.job_name = job_name
        self.interval = interval
        self._news: asyncio.Queue[Any] = asyncio.Queue()

    def tell(self, item: Any) -> None:
        self._news.put_nowait(item)

    async def next(self) -> Any:
        return await self._news.get()


ClientFactory = Callable[[], Awaitable[Any]]


class SharedJobPoller:
    def __init__(self, key: tuple, client_factory: ClientFactory, page_size: int = PAGE_SIZE,
                 job_type: JobType = CUSTOM_JOB):
        self.key = key
        self.job_type = job_type
        self._client_factory = client_factory
        self._client: Any = None
        self._page_size = page_size
        self._watchers: dict[str, set[Watcher]] = {}
        self._last_seen: dict[str, tuple] = {}  # job name -> (state, update_time) last told
        self._create_times: dict[str, datetime] = {}
        self._task: asyncio.Task | None = None
        self._failures = 0
        self.calls = 0  # API requests this poller made (lists and gets)

    # ---------------------------------------------------------------- watchers

    def watch(self, job_name: str, interval: float) -> Watcher:
        watcher = Watcher(job_name, interval)
        self._watchers.setdefault(job_name, set()).add(watcher)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"vertex-poller-{self.key}")
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        watchers = self._watchers.get(watcher.job_name)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[watcher.job_name]
                self._last_seen.pop(watcher.job_name, None)
                self._create_times.pop(watcher.job_name, None)
        if not self._watchers and self._task is not None:
            self._task.cancel()  # the last watcher left: stop polling
            self._task = None
            _POLLERS.pop((id(asyncio.get_running_loop()), self.key, self.job_type.key), None)

    @property
    def interval(self) -> float:
        return min((w.interval for ws in self._watchers.values() for w in ws), default=30.0)

    # ---------------------------------------------------------------- the loop

    async def _run(self) -> None:
        from airflow_gpu_sched.vertex.client import VertexError

        while self._watchers:
            try:
                await self.poll_once()
                await self._reaper().maybe_reap(self._client)  # at most one pass per reaper interval
                self._failures = 0
                delay = self.interval * (1 + random.uniform(0, JITTER))
            except Exception as exc:  # noqa: BLE001 - VertexError after the client's own brief retries: back off
                # everyone once. Anything else too: a poller task that died would leave its triggers
                # waiting for ever (it did, issue 41); they see the error and give up after their window.
                self._failures += 1
                delay = min(MAX_BACKOFF, self.interval * 2 ** self._failures) * random.uniform(0.5, 1.0)
                log.warning("shared poll of %s failed (%s); next in %.1fs", self.key,
                            exc if isinstance(exc, VertexError) else f"{type(exc).__name__}: {exc}", delay)
                for watchers in list(self._watchers.values()):
                    for watcher in watchers:
                        watcher.tell(exc)
            await asyncio.sleep(delay)

    def _reaper(self) -> Any:
        from airflow_gpu_sched.triggers.reaper import reaper_for

        return reaper_for((id(asyncio.get_running_loop()), self.key, self.job_type.key), self.job_type)

    async def poll_once(self) -> None:
        from airflow_gpu_sched.vertex.client import NotFoundError

        if self._client is None:
            self._client = await self._client_factory()
        wanted = set(self._watchers)
        found: dict[str, Any] = {}
        await self._list_into(found, wanted, self._active_filter(), self.job_type.watch_mask(), final=False)
        missing = wanted - set(found)  # ended since the last poll, or not ours to list
        dated = {n: self._create_times[n] for n in missing if n in self._create_times}
        if len(dated) > FEW_MISSING:  # many ended at once: one list of ended jobs, not a GET each
            await self._list_into(found, missing, self._ended_filter(dated.values()), self.job_type.final_mask(),
                                  final=True)
        for name in wanted - set(found):  # ask for each one alone
            if name not in self._watchers:
                continue
            try:
                found[name] = await self.job_type.get(self._client, name)
            except NotFoundError as exc:
                self._tell(name, exc)
            finally:
                self.calls += 1
        for name, job in found.items():
            if job.create_time is not None:
                self._create_times[name] = job.create_time
            seen = (job.state, job.update_time)
            if self._last_seen.get(name) != seen:  # wake only the triggers whose job changed
                self._last_seen[name] = seen
                self._tell(name, job)

    async def _list_into(self, found: dict[str, Any], wanted: set[str], flt: str, read_mask: str,
                         final: bool) -> None:
        """Page through one list; keep the wanted jobs. From the list of active jobs (masked to what
        a waiting trigger reads) a job already ended is left out: its final read is a GET or the
        list of ended jobs."""
        token = None
        while True:
            page = await self.job_type.list_page(self._client, flt, self._page_size, token, read_mask)
            self.calls += 1
            for job in self.job_type.items(page):
                if job.name in wanted and (final or not self.job_type.view(job).is_terminal()):
                    found[job.name] = job
            if not (token := page.next_page_token):
                return

    def _active_filter(self) -> str:
        parts = [OURS]
        if self._create_times and set(self._create_times) >= set(self._watchers):
            # "`create_time` supports `=`, `!=`,`<`, `<=`,`>`, `>=` comparisons. `create_time` must be
            # in RFC 3339 format." (ListCustomJobsRequest.filter, v1 job_service.proto)
            oldest = min(self._create_times.values()) - CLOCK_MARGIN
            parts.append(f'create_time>="{format_timestamp(oldest)}"')
        parts.append(self.job_type.not_terminal_filter())
        return " AND ".join(parts)

    def _ended_filter(self, create_times: Any) -> str:
        times = list(create_times)
        # create_time bounds: "`create_time` supports `=`, `!=`,`<`, `<=`,`>`, `>=` comparisons"
        # (ListCustomJobsRequest.filter, v1 job_service.proto); AND per AIP-160 (google.aip.dev/160)
        return " AND ".join([OURS, f'create_time>="{format_timestamp(min(times) - CLOCK_MARGIN)}"',
                             f'create_time<="{format_timestamp(max(times) + CLOCK_MARGIN)}"',
                             self.job_type.terminal_filter()])

    def _tell(self, name: str, item: Any) -> None:
        for watcher in self._watchers.get(name, ()):
            watcher.tell(item)


# One poller per (event loop, connection, project, location, job type).
_POLLERS: dict[tuple, SharedJobPoller] = {}


def shared_poller(key: tuple, client_factory: ClientFactory, job_type: JobType = CUSTOM_JOB) -> SharedJobPoller:
    loop_key = (id(asyncio.get_running_loop()), key, job_type.key)
    poller = _POLLERS.get(loop_key)
    if poller is None:
        poller = _POLLERS[loop_key] = SharedJobPoller(key, client_factory, job_type=job_type)
    return poller
