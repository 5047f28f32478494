"""A try told to stop: the operator's ``on_kill`` (SIGTERM to the task, ``execution_timeout``,
a kill of ``airflow dags test``, the worker polling with ``deferrable=False``).

First the try is marked stopped (from then on it creates no job and moves no plan:
:mod:`airflow_gpu_sched.orchestration.stops`, checked by the run loop), then its job (a race:
every member) is cancelled, each cancel recorded as ours, in this process and in the task's
ledger, so its CANCELLED is never read as the service's expiry (``outcomes.cancel_cause``).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.operators import vertex_calls
from airflow_gpu_sched.orchestration import stops


def kill(op: Any) -> None:
    from airflow_gpu_sched.vertex.client import InvalidArgumentError

    stops.stop(op.try_key)
    jobs = [(name, "race member ") for name in op.race_jobs] + ([(op.running_job, "")] if op.running_job else [])
    for name, what in jobs:
        op.log.info("task killed: cancelling %s%s", what, name)
        stops.note_cancel(name)
        if op.run_ledger is not None:
            try:
                op.run_ledger.note_cancel(name)
            except Exception as exc:  # the process record above still holds, and the cancel goes out
                op.log.warning("could not record the cancel of %s in the task state: %s", name, exc)
        try:
            vertex_calls.cancel(op, name)
        except InvalidArgumentError:
            pass  # already finished


def kill_after_deferral_timeout(op: Any, ledger: Any) -> None:
    """A try Airflow resumed only to fail it (its deferral timed out: ``execution_timeout``), its
    trigger cancelled without ``on_kill``: it stops like a killed one, on the jobs its ledger
    still has open."""
    op.run_ledger = ledger
    jobs = ledger.open_jobs()
    if ledger.race is not None:
        op.race_jobs = jobs
    else:
        op.running_job = jobs[0] if jobs else None
    op.log.info("the deferral ended on Airflow's timeout: the try stops")
    kill(op)
