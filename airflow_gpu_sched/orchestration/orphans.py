"""Which active jobs no live task instance owns: the decision, no I/O.

Used by ``airflow gpu-sched jobs orphans`` (:mod:`airflow_gpu_sched.tools.platform`, task
instances from the metadata DB) and by the reaper in the triggerer
(:mod:`airflow_gpu_sched.triggers.reaper`, task instance states from the triggerer's supervisor).

Which task instance owns a job: the operators label every job with ``managed-by``,
``airflow-dag``, ``airflow-task``, ``airflow-map-index`` (mapped tasks), ``airflow-run`` and
``airflow-try``. Label values are lowercased and cut to 63 characters (:func:`label_value`), so a
job is matched to the task instances whose ids give the same label values. A job with no
``airflow-run`` label (submitted before the label existed) is matched to that task in every run.

Whose job it is comes first (:mod:`.deployment`): a job is judged against this deployment's task
instances only when its ``airflow-deployment`` label is this deployment's id. Another
deployment's job, or one with no such label, is never cancellable (:attr:`Orphan.cancellable`):
this deployment's metadata DB says nothing about it.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

from airflow_gpu_sched.orchestration.deployment import DEPLOYMENT_LABEL, THIS, owner
from airflow_gpu_sched.orchestration.ledger import MANAGED_LABEL, MANAGED_VALUE

# "`labels.key=value` - key:value equality" (ListCustomJobsRequest.filter, v1 job_service.proto;
# the same in the tuning-job and training-pipeline lists)
MANAGED_FILTER = f'labels.{MANAGED_LABEL}="{MANAGED_VALUE}"'

# A task instance in one of these will still look after its job (a retry re-attaches by the
# ledger), so its job is not an orphan.
ALIVE_STATES = frozenset({"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule",
                          "restarting"})


def label_value(text: str) -> str:
    """Any text as a valid label value: lowercase, [a-z0-9_-], at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower())[:63].strip("-")


@dataclass(frozen=True)
class JobRow:
    name: str
    job_type: str
    dag: str | None
    task: str | None
    map_index: str | None
    run: str | None
    try_number: str | None
    strategy: str | None
    state: str | None
    created: str | None
    started: str | None  # Google's startTime: set at admission (recorded), NOT when the job got capacity
    ended: str | None
    submission: str | None = None  # the operator's submission key label
    parent: str | None = None  # a tuning job's trial / a pipeline's custom job: the parent's name
    deployment: str | None = None  # the airflow-deployment label: which Airflow deployment created it

    @property
    def active(self) -> bool:
        from airflow_gpu_sched.vertex.enums import JobState

        return self.state is not None and not JobState(self.state).is_terminal()


def link_children(rows: list[JobRow]) -> list[JobRow]:
    """A tuning job's trials and a pipeline's custom job carry its labels (submission key included):
    name their parent, so that the parent is what `jobs orphans` reports and cancels."""
    parents = {r.submission: r.name for r in rows if r.job_type != "custom_job" and r.submission}
    return [replace(r, parent=parents[r.submission]) if r.job_type == "custom_job" and r.submission in parents
            else r for r in rows]


@dataclass(frozen=True)
class TaskInstanceRow:
    dag_id: str
    task_id: str
    map_index: int
    run_id: str
    state: str | None
    try_number: int


@dataclass(frozen=True)
class Orphan:
    job: JobRow
    why: str
    owner: str = THIS  # deployment.THIS, OTHER or UNKNOWN

    @property
    def cancellable(self) -> bool:
        """Only this deployment's own jobs: another's (or an unlabelled one) is judged by its owner."""
        return self.owner == THIS


def owned_by(job: JobRow, mine: str | None) -> str:
    """deployment.THIS / OTHER / UNKNOWN. ``mine`` None (not known): no job is THIS, none cancellable."""
    return owner({DEPLOYMENT_LABEL: job.deployment} if job.deployment else None, mine or "")


def find_orphans(jobs: Iterable[JobRow], task_instances: Iterable[TaskInstanceRow],
                 mine: str | None = None) -> list[Orphan]:
    """Active jobs no live task instance owns: the decision, no I/O. Each orphan says whose job it
    is against ``mine``, this deployment's id; only :data:`THIS` ones are cancellable (without
    ``mine``, none is)."""
    by_task: dict[tuple[str, str, str], list[TaskInstanceRow]] = {}
    for ti in task_instances:
        map_index = "" if ti.map_index in (-1, None) else str(ti.map_index)
        by_task.setdefault((label_value(ti.dag_id), label_value(ti.task_id), map_index), []).append(ti)
    orphans = []
    for job in jobs:
        if not job.active or not job.dag or not job.task or job.parent:
            continue  # ended; not labelled by an operator; or a trial/pipeline job: its parent is reported
        owners = by_task.get((job.dag, job.task, job.map_index or ""), [])
        if job.run:
            owners = [ti for ti in owners if label_value(ti.run_id) == job.run]
        alive = [ti for ti in owners if ti.state in ALIVE_STATES]
        if alive:
            continue
        if not owners:
            why = "no task instance of it in the metadata DB" + ("" if job.run else " (any run)")
        else:
            last = max(owners, key=lambda ti: ti.try_number)
            tried = f", try {last.try_number}" if last.try_number >= 0 else ""  # -1: not read (the reaper's states)
            why = f"task instance is {last.state or 'none'} (run {last.run_id}{tried})"
        orphans.append(Orphan(job, why, owned_by(job, mine)))
    return orphans
