"""One poller per (connection, project, location, job type) in a triggerer's event loop, shared
by every :class:`CustomJobTrigger` of this package there.

Vertex allows about 600 get/list requests per minute per project and region. Polling each job
with its own GET every 10 s spends that budget at 100 jobs. The shared poller instead, once per
interval:

1. lists this package's jobs that are active or changed since the last poll, with paged list
   calls on the job type's collection (``customJobs``, ...; filter: our ``managed-by`` label,
   created no earlier than the oldest job watched, and either not in a terminal state or updated at or after the newest
   ``updateTime`` the last poll saw, so a job that just ended arrives with its final state and
   error in the same list), and
2. GETs only the watched jobs still missing (no label, or ended before the poller knew them),

then wakes only the triggers whose job changed. A 429 or 5xx backs off the whole poller (every
watcher is told, and keeps its own transient-error window); the poller task ends when its last
watcher leaves; a trigger that is cancelled or moved to another triggerer leaves in ``finally``.
Nothing blocks the loop: all I/O is the async client's.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from airflow_gpu_sched.job_types import CUSTOM_JOB, JobType
from airflow_gpu_sched.ledger import MANAGED_LABEL, MANAGED_VALUE
from airflow_gpu_sched.models import format_timestamp

log = logging.getLogger(__name__)

OURS = f'labels.{MANAGED_LABEL}="{MANAGED_VALUE}"'
CLOCK_MARGIN = timedelta(seconds=2)  # updateTime granularity and ordering slack
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
        self._high_water: datetime | None = None  # newest updateTime the last poll saw
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
        from airflow_gpu_sched.client import VertexError

        while self._watchers:
            try:
                await self.poll_once()
                self._failures = 0
                delay = self.interval * (1 + random.uniform(0, JITTER))
            except VertexError as exc:  # after the client's own brief retries: back off everyone once
                self._failures += 1
                delay = min(MAX_BACKOFF, self.interval * 2 ** self._failures) * random.uniform(0.5, 1.0)
                log.warning("shared poll of %s failed (%s); next in %.1fs", self.key, exc, delay)
                for watchers in list(self._watchers.values()):
                    for watcher in watchers:
                        watcher.tell(exc)
            await asyncio.sleep(delay)

    async def poll_once(self) -> None:
        from airflow_gpu_sched.client import NotFoundError

        if self._client is None:
            self._client = await self._client_factory()
        wanted = set(self._watchers)
        found: dict[str, Any] = {}
        token, flt, newest = None, self._filter(), self._high_water
        while True:  # active or just-changed jobs, page by page
            page = await self.job_type.list_page(self._client, flt, self._page_size, token)
            self.calls += 1
            for job in self.job_type.items(page):
                if job.update_time is not None and (newest is None or job.update_time > newest):
                    newest = job.update_time
                if job.name in wanted:
                    found[job.name] = job
            if not (token := page.next_page_token):
                break
        self._high_water = newest
        for name in wanted - set(found):  # ended, or not ours to list: ask for it alone
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

    def _filter(self) -> str:
        parts, not_terminal = [OURS], self.job_type.not_terminal_filter()
        if self._create_times and set(self._create_times) >= set(self._watchers):
            oldest = min(self._create_times.values()) - CLOCK_MARGIN
            parts.append(f'create_time>="{format_timestamp(oldest)}"')
        if self._high_water is not None:
            since = format_timestamp(self._high_water - CLOCK_MARGIN)
            parts.append(f'({not_terminal} OR update_time>="{since}")')
        else:
            parts.append(not_terminal)
        return " AND ".join(parts)

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
