"""The jobs' Cloud Logging lines, tailed for the task logs: one shared tailer per (connection,
identity, project) in a triggerer's event loop, and each trigger's own reading of it.

Cloud Logging allows 60 ``entries.list`` requests a minute per project (docs/fidelity.md). A
tail per job would spend that at 30 jobs polling every 30 s; the shared tailer instead, once per
interval, sends ONE paged ``entries:list`` whose filter ORs every tailed job's id
(``resource.type="ml_job" AND resource.labels.job_id=("1" OR "2" ...) AND
timestamp>="<the oldest position>"``), split in as few calls as the 20,000-character filter
limit allows, and hands each trigger its job's entries. Each trigger keeps its own position and
drops what it already wrote (:func:`log_lines.fresh`), so one trigger resuming from an older
position costs the others nothing but a few repeated entries in the answer.

Where the position is kept: the trigger's serialized kwargs do not change after the deferral,
and the triggerer has no ``task_state_store``; it can write the task instance's XCom (Airflow
keeps a task's XComs while it is deferred: they are cleared when a try starts, not when it
resumes from the triggerer). So after each batch written the trigger saves
``{"job", "timestamp", "insert_id"}`` of its last line under :data:`POSITION_KEY`, and a
trigger started again (a triggerer restart, or the trigger moved to another triggerer) reads it
back and goes on after that line. Lines are never dropped; a triggerer SIGKILLed between
writing a batch and saving its position repeats that one batch (at least once: a write and a
save cannot be made atomic). In ``deferrable=False`` mode (no task instance on the
trigger) the position lives in memory, for the one process that waits.

No line is written before the job's env is known: the stream reads the job once (its spec, as
Vertex returns it) and cuts every env value from each line, in every form a program prints it
(:mod:`.job_secrets`, :mod:`airflow_gpu_sched.orchestration.redaction`); lines that come while
the job cannot be read wait (the position does not move past them).

Log lines are written by the trigger itself (``self.log``), never by the shared task: the
triggerer routes a trigger's log records to its task's log by the trigger's context.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_gpu_sched.orchestration.log_lines import LogPosition
from airflow_gpu_sched.vertex import cloud_logging

log = logging.getLogger(__name__)

POSITION_KEY = "gpu_sched_log_position"
JITTER = 0.1
MAX_BACKOFF = 120.0

ClientFactory = Callable[[], Awaitable[Any]]


class LogTail:
    """A trigger's mailbox: lists of its job's entries (or the error of a failed call)."""

    def __init__(self, job_id: str, interval: float, position: LogPosition):
        self.job_id = job_id
        self.interval = interval
        self.position = position  # the tailer reads it for the query's lower bound
        self._news: asyncio.Queue[Any] = asyncio.Queue()

    def tell(self, item: Any) -> None:
        self._news.put_nowait(item)

    async def next(self) -> Any:
        return await self._news.get()


class SharedLogTailer:
    def __init__(self, key: tuple, client_factory: ClientFactory, filter_limit: int = cloud_logging.FILTER_LIMIT):
        self.key = key
        self.project = key[2]
        self._client_factory = client_factory
        self._client: Any = None
        self._filter_limit = filter_limit
        self._tails: dict[str, set[LogTail]] = {}
        self._task: asyncio.Task | None = None
        self._failures = 0
        self.calls = 0  # entries:list requests this tailer made

    def watch(self, job_id: str, interval: float, position: LogPosition) -> LogTail:
        tail = LogTail(job_id, interval, position)
        self._tails.setdefault(job_id, set()).add(tail)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"log-tailer-{self.key}")
        return tail

    def unwatch(self, tail: LogTail) -> None:
        tails = self._tails.get(tail.job_id)
        if tails is not None:
            tails.discard(tail)
            if not tails:
                del self._tails[tail.job_id]
        if not self._tails and self._task is not None:
            self._task.cancel()
            self._task = None
            _TAILERS.pop((id(asyncio.get_running_loop()), self.key), None)

    @property
    def interval(self) -> float:
        return min((t.interval for ts in self._tails.values() for t in ts), default=30.0)

    async def _run(self) -> None:
        from airflow_gpu_sched.vertex.client import VertexError

        while self._tails:
            try:
                await self.poll_once()
                self._failures = 0
                delay = self.interval * (1 + random.uniform(0, JITTER))
            except VertexError as exc:  # after the client's brief retries: every tail hears of it once
                self._failures += 1
                delay = min(MAX_BACKOFF, self.interval * 2 ** self._failures) * random.uniform(0.5, 1.0)
                log.warning("shared log tail of %s failed (%s); next in %.1fs", self.key, exc, delay)
                for tails in list(self._tails.values()):
                    for tail in tails:
                        tail.tell(exc)
            await asyncio.sleep(delay)

    def _since(self) -> str | None:
        stamps = [t.position.timestamp for ts in self._tails.values() for t in ts]
        if not stamps or any(s is None for s in stamps):
            return None
        return min(stamps, key=cloud_logging.timestamp_key)

    async def poll_once(self) -> None:
        if self._client is None:
            self._client = await self._client_factory()
        since = self._since()
        found: dict[str, list] = {job_id: [] for job_id in self._tails}
        for batch in cloud_logging.batches(sorted(self._tails), since, self._filter_limit):
            flt = cloud_logging.jobs_filter(batch, since)
            token = None
            while True:
                page = await self._client.list_log_entries_page(flt, page_size=cloud_logging.MAX_PAGE_SIZE,
                                                                page_token=token, project=self.project)
                self.calls += 1
                for entry in page.entries:
                    if entry.job_id in found:
                        found[entry.job_id].append(entry)
                if not (token := page.next_page_token):
                    break
        for job_id, entries in found.items():
            if entries:
                for tail in self._tails.get(job_id, ()):
                    tail.tell(entries)


_TAILERS: dict[tuple, SharedLogTailer] = {}


def shared_tailer(key: tuple, client_factory: ClientFactory) -> SharedLogTailer:
    loop_key = (id(asyncio.get_running_loop()), key)
    tailer = _TAILERS.get(loop_key)
    if tailer is None:
        tailer = _TAILERS[loop_key] = SharedLogTailer(key, client_factory)
    return tailer


async def read_all(client: Any, project: str, job_id: str, position: LogPosition) -> list:
    """Every entry of one job after ``position`` (paged): the last lines once the job ended."""
    flt = cloud_logging.jobs_filter([job_id], position.timestamp)
    found, token = [], None
    while True:
        page = await client.list_log_entries_page(flt, page_size=cloud_logging.MAX_PAGE_SIZE, page_token=token,
                                                  project=project)
        found += page.entries
        if not (token := page.next_page_token):
            return found


_IN_MEMORY: dict[str, dict[str, Any]] = {}  # deferrable=False: the waiting process's own positions


class PositionStore:
    """The trigger's position, in its task instance's XCom (see the module's docstring), or in
    memory when the trigger has no task instance (``deferrable=False``)."""

    def __init__(self, trigger: Any, job_name: str):
        self.ti = getattr(trigger, "task_instance", None)
        self.job_name = job_name
        self.problem: str | None = None  # the last failure to read or save, said once in the task log

    def _where(self) -> dict[str, Any]:
        ti = self.ti
        return {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                "map_index": ti.map_index if ti.map_index is not None else -1}

    async def load(self) -> LogPosition:
        if self.ti is None:
            return LogPosition.of(_IN_MEMORY.get(self.job_name))
        try:
            from airflow_gpu_sched import compat

            saved = await compat.xcom_aget_one(key=POSITION_KEY, **self._where())
        except Exception as exc:  # no XCom reachable: start from the job's first line
            self.problem = f"log position not read ({type(exc).__name__}: {exc})"
            return LogPosition()
        if isinstance(saved, dict) and saved.get("job") == self.job_name:
            return LogPosition.of(saved)
        return LogPosition()

    async def save(self, position: LogPosition) -> None:
        if position.timestamp is None:
            return
        value = {"job": self.job_name, **position.to_json()}
        if self.ti is None:
            _IN_MEMORY[self.job_name] = value
            return
        try:
            from airflow_gpu_sched import compat

            await compat.xcom_aset(POSITION_KEY, value, **self._where())
        except Exception as exc:  # the lines are written all the same; a restart may repeat some
            self.problem = f"log position not saved ({type(exc).__name__}: {exc})"


class JobLogStream:
    """One trigger's tail of its job: started with the wait, drained and stopped when the job
    ended. Lines go to ``trigger.log`` (the task log), from the trigger's own task."""

    def __init__(self, trigger: Any, job_name: str, client_factory: ClientFactory, key: tuple, interval: float,
                 lines_per_minute: int | None):
        from airflow_gpu_sched.orchestration.log_lines import LineBudget

        self.trigger, self.job_name, self.key = trigger, job_name, key
        self.project, self.job_id = job_name.split("/")[1], cloud_logging.job_id_of(job_name)
        self._client_factory = client_factory
        self.interval = interval
        self.budget = LineBudget(lines_per_minute)
        self.store = PositionStore(trigger, job_name)
        self.position = LogPosition()
        self._task: asyncio.Task | None = None
        self._warned = False
        self._store_warned = False
        self.redact: Any = None  # the job's env values cut (a Redactor), once read from the job
        self._secrets_warned = False

    async def start(self) -> None:
        self.position = await self.store.load()
        self._say_store_problem()
        if self.position.timestamp:
            self.trigger.log.info("job log: going on after %s (%s), the last line written before",
                                  self.position.timestamp, self.position.insert_id)
        self._task = asyncio.ensure_future(self._follow())  # a child task: the trigger's log context

    async def _follow(self) -> None:
        tailer = shared_tailer(self.key, self._client_factory)
        tail = tailer.watch(self.job_id, self.interval, self.position)
        try:
            while True:
                item = await tail.next()
                if isinstance(item, Exception):
                    if not self._warned:
                        self.trigger.log.warning("job log: reading Cloud Logging failed, retrying: %s", item)
                        self._warned = True
                    continue
                await self.write(item)
                tail.position = self.position
        finally:
            tailer.unwatch(tail)

    async def write(self, entries: list) -> None:
        import time

        from airflow_gpu_sched.orchestration.log_lines import advanced, fresh, task_log_lines

        new = fresh(entries, self.position)
        if new and not await self._know_secrets():
            return  # held back, position unmoved: the next poll brings these lines again
        for entry in new:
            state = entry.job_state  # Vertex's own word on a state change: an exact time
            if state and hasattr(self.trigger, "note_logged_state"):
                self.trigger.note_logged_state(state, entry.timestamp)
            admitted, note = self.budget.admit(time.time())
            if note:
                self.trigger.log.warning("job log: %s", note)
            if admitted:
                for line in task_log_lines(entry, self.redact):
                    self.trigger.log.info(line)
        if new:
            self.position = advanced(self.position, new)
            await self.store.save(self.position)
        self._say_store_problem()

    async def _know_secrets(self) -> bool:
        """The job's env values are known (read once from the job, :mod:`.job_secrets`): no line
        is written before, so none of them reaches the task log in clear."""
        from airflow_gpu_sched.triggers.job_secrets import learn
        from airflow_gpu_sched.vertex.client import VertexError

        if self.redact is not None:
            return True
        try:
            self.redact = await learn(await self._client_factory(), self.job_name,
                                      getattr(self.trigger, "masked", None))
        except VertexError as exc:
            if not self._secrets_warned:
                self.trigger.log.warning("job log: lines held back until the job's env is read (none of its values "
                                         "may be written): reading %s failed: %s", self.job_name, exc)
                self._secrets_warned = True
            return False
        return True

    def _say_store_problem(self) -> None:
        if self.store.problem and not self._store_warned:
            self.trigger.log.warning("job log: %s: a triggerer restart may repeat lines", self.store.problem)
            self._store_warned = True

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def finish(self) -> None:
        """The job ended: stop following, write what is left of its lines."""
        from airflow_gpu_sched.vertex.client import VertexError

        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (the follower's end is not the job's)
                pass
        try:
            await self.write(await read_all(await self._client_factory(), self.project, self.job_id, self.position))
        except VertexError as exc:
            self.trigger.log.warning("job log: the last lines could not be read: %s", exc)
        if self.redact is None and self._secrets_warned:
            self.trigger.log.warning("job log: the job's env could not be read: its lines were not written here "
                                     "(all of them are in Cloud Logging)")
        note = self.budget.flush()
        if note:
            self.trigger.log.warning("job log: %s", note)
