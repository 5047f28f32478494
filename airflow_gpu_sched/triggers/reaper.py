"""The reaper: cancels an active job no live task try owns, from inside the shared poller.

Covers the paths Airflow gives no ``on_kill`` (docs/reaper.md): a task marked failed or cleared
before any triggerer took its trigger, a worker host lost in a sync task, a DAG run deleted, an
``on_kill`` whose cancel never landed. Each :class:`~.poller.SharedJobPoller` (one per connection,
project, region and job type in a triggerer) calls :meth:`Reaper.maybe_reap` after its poll: at
most one pass per ``[gpu_sched] reaper_interval``, each one paged list of this package's active
jobs (labels and state only).

The decision is pure (:func:`~airflow_gpu_sched.orchestration.orphans.find_orphans` and
:class:`Sightings`): a job is cancelled only when it was seen orphaned on two passes at least
``[gpu_sched] reaper_grace`` apart, and the task instances are read again just before the cancel.
The task instance states come from the triggerer's supervisor (Execution API ``GetTaskStates``,
as :mod:`.ownership` reads them), never the database. Anything unreadable, and a (DAG, task)
with no task instance at all (a DAG id that its label does not spell exactly, or a DAG whose
every run was deleted), is left alone: ``airflow gpu-sched jobs orphans`` reads the database for those.

Only this deployment's jobs (:mod:`~airflow_gpu_sched.orchestration.deployment`): the list asks
for the ``airflow-deployment`` label of this deployment's id, and every listed job is checked
again against it (an endpoint that ignored the filter changes nothing). Another deployment's
job, and a job with no such label (submitted before it existed), is never cancelled. A
``[gpu_sched] deployment_id`` that is not a label value, or an id not readable, cancels nothing
(logged).

Every cancel is logged with the job, its task instance (from the job's labels) and why; never
the job's spec, env or anything of the connection.

May import: vertex, orchestration, triggers; airflow only inside functions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu_sched.orchestration import deployment as deployments
from airflow_gpu_sched.orchestration.deployment import DEPLOYMENT_LABEL, THIS
from airflow_gpu_sched.orchestration.orphans import (MANAGED_FILTER, JobRow, Orphan, TaskInstanceRow, find_orphans,
                                                      label_value, link_children, owned_by)

log = logging.getLogger(__name__)

SECTION = "gpu_sched"
INTERVAL_OPTION, GRACE_OPTION = "reaper_interval", "reaper_grace"
DEFAULT_INTERVAL, DEFAULT_GRACE = 300.0, 600.0  # seconds: a pass every 5 min, two sightings 10 min apart
PAGE_SIZE = 500
MAX_PAGES = 200  # a list that pages on past this (or repeats a token) is given up for this pass

# (dag label, task label) -> {run_id: {state key: state}} as GetTaskStates answers, or None: unreadable
StatesReader = Callable[[str, str], Awaitable["dict[str, dict[str, Any]] | None"]]


def settings() -> tuple[float, float]:
    """(interval, grace) in seconds from ``[gpu_sched]`` (env ``AIRFLOW__GPU_SCHED__REAPER_INTERVAL``,
    ``..._GRACE``); an interval of 0 turns the reaper off. A bad value falls back to the default."""
    from airflow_gpu_sched import compat

    conf = compat.conf

    def read(option: str, default: float) -> float:
        try:
            value = conf.getfloat(SECTION, option, fallback=default)
        except Exception as exc:  # AirflowConfigException: not a number
            log.warning("[%s] %s is not a number of seconds (%s): using %s", SECTION, option, exc, default)
            return default
        return value if value >= 0 else default

    return read(INTERVAL_OPTION, DEFAULT_INTERVAL), read(GRACE_OPTION, DEFAULT_GRACE)


# ---------------------------------------------------------------------------------- the decision (pure)

@dataclass
class Sightings:
    """When each job was first seen orphaned. A job seen owned again (or ended) is forgotten, so a
    try that re-attaches in between starts the count again."""

    first_seen: dict[str, float] = field(default_factory=dict)

    def sight(self, orphans: list[Orphan], unread: set[str], now: float, grace: float) -> list[Orphan]:
        """The orphans due for a cancel: seen orphaned at least ``grace`` ago and now. ``unread``:
        the listed jobs whose owners this pass could not read (they keep their first sighting);
        any other job not orphaned now (owned again, ended) is forgotten."""
        orphaned = {o.job.name for o in orphans}
        for name in list(self.first_seen):
            if name not in orphaned and name not in unread:
                del self.first_seen[name]
        due = []
        for orphan in orphans:
            first = self.first_seen.setdefault(orphan.job.name, now)
            if now - first >= grace and now > first:  # two sightings, never one
                due.append(orphan)
        return due

    def forget(self, name: str) -> None:
        self.first_seen.pop(name, None)


def task_rows(dag_id: str, task_id: str, states: dict[str, dict[str, Any]]) -> list[TaskInstanceRow]:
    """GetTaskStates' answer for one task (``{run_id: {"task" or "task_<map index>": state}}``) as rows."""
    rows = []
    for run_id, by_key in (states or {}).items():
        for key, state in (by_key or {}).items():
            if key == task_id:
                index = -1
            elif key.startswith(task_id + "_") and key[len(task_id) + 1:].isdigit():
                index = int(key[len(task_id) + 1:])
            else:
                continue
            state = getattr(state, "value", state)
            rows.append(TaskInstanceRow(dag_id, task_id, index, run_id, None if state is None else str(state), -1))
    return rows


def job_rows(job_type: Any, resources: list[Any]) -> list[JobRow]:
    """Listed jobs (masked to name, state, labels) as rows: owner from the labels."""
    rows = []
    for resource in resources:
        view = job_type.view(resource)
        labels = view.labels or {}
        state = getattr(view.state, "value", view.state)
        rows.append(JobRow(name=view.name or "", job_type=job_type.key, dag=labels.get("airflow-dag"),
                           task=labels.get("airflow-task"), map_index=labels.get("airflow-map-index"),
                           run=labels.get("airflow-run"), try_number=labels.get("airflow-try"), strategy=None,
                           state=state, created=None, started=None, ended=None,
                           submission=labels.get("gpu-sched-submission"), deployment=labels.get(DEPLOYMENT_LABEL)))
    return link_children(rows)


def describe(job: JobRow) -> str:
    """The task instance a job was submitted for, from its labels only."""
    index = f" map_index={job.map_index}" if job.map_index else ""
    return f"dag={job.dag} task={job.task}{index} run={job.run} try={job.try_number}"


# ---------------------------------------------------------------------------------- the pass (I/O)

async def read_states_from_supervisor(dag_id: str, task_id: str) -> dict[str, dict[str, Any]] | None:
    """Every run's state of one task, through the triggerer's supervisor; None outside a triggerer
    or on any error (the job is then left alone this pass)."""
    from airflow_gpu_sched.triggers.ownership import supervisor_comms

    comms = supervisor_comms()
    if comms is None:
        return None
    from airflow.sdk.execution_time.comms import GetTaskStates

    try:
        answer = await comms.asend(GetTaskStates(dag_id=dag_id, task_ids=[task_id]))
    except Exception as exc:
        log.warning("reaper: could not read the task states of %s.%s (%s): its jobs are left alone this pass",
                    dag_id, task_id, exc)
        return None
    states = getattr(answer, "task_states", None)
    return states if isinstance(states, dict) else None


class Reaper:
    """One per (event loop, poller key, job type); survives the poller stopping and starting again."""

    def __init__(self, job_type: Any, read_states: StatesReader = read_states_from_supervisor,
                 interval: float | None = None, grace: float | None = None,
                 clock: Callable[[], float] = time.monotonic, deployment: str | None = None):
        default_interval, default_grace = settings() if interval is None or grace is None else (0.0, 0.0)
        self.deployment = deployment  # None: read at the first pass (the option, else the Variable)
        self.job_type = job_type
        self.interval = default_interval if interval is None else float(interval)
        self.grace = default_grace if grace is None else float(grace)
        self._read_states = read_states
        self._clock = clock
        self._next = clock() + self.interval  # the first pass one interval after the first poll
        self.sightings = Sightings()
        self.passes = 0
        self.calls = 0  # API requests (lists and cancels)

    async def maybe_reap(self, client: Any) -> list[Orphan]:
        if self.interval <= 0 or self._clock() < self._next:
            return []
        if self._read_states is read_states_from_supervisor:
            from airflow_gpu_sched.triggers.ownership import supervisor_comms

            if supervisor_comms() is None:  # not in a triggerer (dag.test(), a test's loop): nothing to read owners from
                return []
        self._next = self._clock() + self.interval
        try:
            return await self.reap_once(client)
        except Exception as exc:  # never break the poll that carries it; the next pass tries again
            log.warning("reaper pass of %s failed: %s", self.job_type.key, exc)
            return []

    async def reap_once(self, client: Any) -> list[Orphan]:
        """One pass: list, decide, re-read each due job's owners, cancel. The cancelled orphans."""
        self.passes += 1
        if self.deployment is None:
            self.deployment = await this_deployment()
        if self.deployment is None:  # not known (yet): no job can be told to be ours
            return []
        jobs = [job for job in job_rows(self.job_type, await self._list_active(client))
                if job.active and job.dag and job.task and not job.parent  # a trial: its parent is the one
                and not (job.state or "").endswith("CANCELLING")  # its cancel is under way already
                and owned_by(job, self.deployment) == THIS]  # the filter asked for it; checked, not trusted
        owners, examined = await self._owners(jobs)
        orphans = [o for o in find_orphans([j for j in jobs if j.name in examined], owners, self.deployment)
                   if o.cancellable]
        unread = {j.name for j in jobs} - examined
        due = self.sightings.sight(orphans, unread, self._clock(), self.grace)
        log.info("reaper pass %d (%s): %d active jobs, %d examined, %d orphaned, %d due",
                 self.passes, self.job_type.key, len(jobs), len(examined), len(orphans), len(due))
        cancelled = []
        for orphan in due:
            fresh, readable = await self._owners([orphan.job])  # just before the cancel: a try may have come back
            still = find_orphans([orphan.job], fresh, self.deployment) if orphan.job.name in readable else []
            if not still or not still[0].cancellable:
                log.info("reaper: %s (%s) is owned again or unreadable: left alone", orphan.job.name,
                         describe(orphan.job))
                self.sightings.forget(orphan.job.name)
                continue
            await self._cancel(client, still[0])
            self.sightings.forget(orphan.job.name)
            cancelled.append(still[0])
        return cancelled

    async def _list_active(self, client: Any) -> list[Any]:
        from airflow_gpu_sched.orchestration.job_types import WATCH_FIELDS

        flt = (f'{MANAGED_FILTER} AND labels.{DEPLOYMENT_LABEL}="{self.deployment}" AND '
               f"{self.job_type.not_terminal_filter()}")
        found, token, seen = [], None, set()
        for _ in range(MAX_PAGES):
            page = await self.job_type.list_page(client, flt, PAGE_SIZE, token, ",".join(WATCH_FIELDS))
            self.calls += 1
            found += self.job_type.items(page)
            if not (token := page.next_page_token):
                return found
            if token in seen:
                break
            seen.add(token)
        raise RuntimeError(f"the list of {self.job_type.key}s did not end (a repeated page token, or over "
                           f"{MAX_PAGES} pages): this pass is given up")

    async def _owners(self, jobs: list[JobRow]) -> tuple[list[TaskInstanceRow], set[str]]:
        """The task instances of the jobs' tasks, and the jobs whose owners could be read: the
        labels must spell the ids (label == id) and the task must have a task instance in some run."""
        rows: list[TaskInstanceRow] = []
        examined: set[str] = set()
        cache: dict[tuple[str, str], list[TaskInstanceRow] | None] = {}
        for job in jobs:
            key = (job.dag or "", job.task or "")
            if key not in cache:
                states = await self._read_states(*key) if all(label_value(k) == k and k for k in key) else None
                cache[key] = None if states is None else task_rows(key[0], key[1], states)
                if cache[key]:
                    rows += cache[key]
            if cache[key]:  # None: unreadable; []: no task instance at all (an id its label does not spell?)
                examined.add(job.name)
        return rows, examined

    async def _cancel(self, client: Any, orphan: Orphan) -> None:
        from airflow_gpu_sched.vertex.client import InvalidArgumentError, VertexError

        try:
            await self.job_type.cancel(client, orphan.job.name)
            sent = True
        except InvalidArgumentError:  # 400 FAILED_PRECONDITION: it ended since the list
            sent = False
        except VertexError as exc:
            log.error("reaper: could not cancel %s (%s; %s): %s; the next pass tries again", orphan.job.name,
                      describe(orphan.job), orphan.why, exc)
            return
        finally:
            self.calls += 1
        log.warning("reaper: %s %s (%s): %s", "cancelled" if sent else "found ended", orphan.job.name,
                    describe(orphan.job), orphan.why)


async def this_deployment() -> str | None:
    """This deployment's id: ``[gpu_sched] deployment_id``, else the Variable through the
    triggerer's supervisor. None when bad (an error logged: the reaper cancels nothing) or not
    there yet (no job submitted with it: nothing to reap)."""
    from airflow_gpu_sched.triggers.ownership import supervisor_comms

    try:
        if found := deployments.configured():
            return found
        comms = supervisor_comms()
        return None if comms is None else await deployments.read_from_supervisor(comms)
    except deployments.DeploymentIdError as exc:
        log.error("reaper: cancels nothing: %s", exc)
    except Exception as exc:
        log.warning("reaper: could not read this deployment's id (%s): nothing reaped this pass", exc)
    return None


_REAPERS: dict[tuple, Reaper] = {}


def reaper_for(loop_key: tuple, job_type: Any) -> Reaper:
    """The reaper of one poller key in one event loop (its sightings outlive the poller)."""
    reaper = _REAPERS.get(loop_key)
    if reaper is None:
        reaper = _REAPERS[loop_key] = Reaper(job_type)
    return reaper
