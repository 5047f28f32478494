"""The emulator's jobs as timeline nights: one night per DAG run (the jobs' ``airflow-dag`` and
``airflow-run`` labels), one task per ``airflow-task``, its jobs as attempts (a tuning job's
trials as trials), each with its exact state history; jobs without those labels go to "other
jobs". The picture is drawn by :mod:`airflow_gpu_sched.drawing.timeline`.

May import: drawing, emulator; never airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_gpu_sched.drawing.timeline import Attempt, Night, Task, attempt_from_history, task_from_attempts

if TYPE_CHECKING:
    from airflow_gpu_sched.emulator.backend import Backend
    from airflow_gpu_sched.emulator.resources.job_record import JobRecord

OTHER = "other jobs (no Airflow labels)"


def _attempt(record: JobRecord, label: str, now) -> Attempt:
    job = record.job
    strategy = record.strategy_name
    error = job.error.message if job.error and job.error.message else None
    accelerator = next((p.machine_spec.accelerator_type.value for _, p in job.job_spec.active_pools()
                        if p.machine_spec and p.machine_spec.accelerator_type), None)
    return attempt_from_history(
        label, strategy, record.location, record.history, now, restarts=record.restarts,
        preempted_at_end=record.state.value == "JOB_STATE_FAILED" and "STOCKOUT" in (error or ""),
        gpus=job.job_spec.accelerators_held(), accelerator=accelerator, error=error)


def nights(backend: Backend) -> list[Night]:
    """Every job of the emulator, oldest night first."""
    now = backend.clock.now()
    runs: dict[tuple[str, str], dict[str, list[JobRecord]]] = {}
    for record in backend.jobs.values():  # in creation order
        labels = record.job.labels or {}
        if "airflow-dag" in labels:
            key = (labels["airflow-dag"], labels.get("airflow-run", ""))
            task = labels.get("airflow-task", "?") + (f"[{labels['airflow-map-index']}]"
                                                      if "airflow-map-index" in labels else "")
        else:
            key, task = (OTHER, ""), f"{record.job.display_name} ({record.job.job_id})"
        runs.setdefault(key, {}).setdefault(task, []).append(record)
    out = []
    for (dag, run), tasks in runs.items():
        built = []
        for name, records in tasks.items():
            if all(r.owner and "/hyperparameterTuningJobs/" in r.owner for r in records):  # parallel trials
                built.append(Task(name, tuple(
                    _attempt(r, "trial " + (r.job.display_name or "").rsplit("-", 1)[-1], now) for r in records)))
            else:
                built.append(task_from_attempts(name, [_attempt(r, f"#{i}", now) for i, r in enumerate(records, 1)]))
        out.append(Night(f"{dag} {run}".strip(), tuple(built)))
    return out
