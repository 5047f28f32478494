"""A retry re-attaches to its earlier try's live job where Airflow keeps no ledger across tries
(3.1 and 3.2: no ``task_state_store``, ``compat.HAS_TASK_STATE_STORE`` false).

There the ledger lives in the try's own XCom, which Airflow clears when the next try starts
(orchestration/ledger.py). What is still known is on Vertex: every job carries the labels of the
task instance that submitted it (``managed-by``, the deployment, ``airflow-dag``/``-task``/
``-run``/``-map-index``, ``airflow-try``), its submission key and its plan position
(:data:`POSITION_LABEL`), the same labels the reconcile loop and ``jobs orphans`` trust. At the
start of a retry (a try after the first since the last clear) whose ledger is empty, the jobs
with this task instance's labels are listed in each location of the plan; a live one (not
ended) submitted by an earlier try is adopted: its key and position go in the ledger, and the
try goes on as a try that died before saving the job's name does (found by its key, re-attached).
A job that SUCCEEDED is taken on the same way (the run is complete: the retry trains nothing).

What this does not bring back (docs/compatibility.md): the earlier tries' attempt history and
counts (a retry on 3.1/3.2 starts the plan's budgets from its own try), a job that already
ended otherwise than SUCCEEDED (the earlier try saw it, or died: the retry submits anew, where a
kept ledger would let the plan act on it), and a race: several live members are not adopted
(the retry races anew, the earlier members run to their end).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.orchestration.ledger import SUBMISSION_LABEL

POSITION_LABEL = "gpu-sched-position"  # the plan position (index into op.positions()) the job was created at
_NOT_IDENTITY = ("airflow-try", "airflow-map-index")  # the try differs; the map index is matched below


def position_label(position: int) -> dict[str, str]:
    return {POSITION_LABEL: str(position)}


def identity_filter(identity: dict[str, str]) -> str:
    """``labels.KEY="value" AND ...`` (ListCustomJobsRequest.filter) of the task instance's labels."""
    return " AND ".join(f'labels.{key}="{value}"' for key, value in sorted(identity.items())
                        if key not in _NOT_IDENTITY)


def choose(jobs: list[Any], identity: dict[str, str], try_number: int, first_try: int,
           positions: int) -> tuple[Any, int] | None:
    """Of the listed jobs (views), the job an earlier try since the last clear submitted that
    this try takes on, and its plan position: the one live job, else the newest that SUCCEEDED
    (its try died, or failed after the success: the run is complete, as a kept ledger says);
    None when there is none, or several live (a race)."""
    live, succeeded = [], []
    for job in jobs:
        labels = job.labels or {}
        if labels.get("airflow-map-index") != identity.get("airflow-map-index"):
            continue
        submitted_by, key = labels.get("airflow-try", ""), labels.get(SUBMISSION_LABEL)
        position = labels.get(POSITION_LABEL, "")
        if not key or not submitted_by.isdigit() or not first_try <= int(submitted_by) < try_number:
            continue
        if not position.isdigit() or int(position) >= positions:
            continue
        if not job.is_terminal():
            live.append((job, int(position)))
        elif job.state is not None and job.state.value == "JOB_STATE_SUCCEEDED":
            succeeded.append((job, int(position)))
    if live:
        return live[0] if len(live) == 1 else None
    return max(succeeded, key=lambda found: str(found[0].create_time or "")) if succeeded else None


def adopt_earlier_job(op: Any, context: Any, ledger: Any) -> str | None:
    """On a retry without a kept ledger: adopt the earlier try's live job (see the module doc).
    Returns the job's name, or None (nothing to adopt, or a kept ledger)."""
    from airflow_gpu_sched.operators.events import first_try
    from airflow_gpu_sched.operators.running import try_number
    from airflow_gpu_sched.orchestration.training_spec import labels

    tried, first = try_number(context), first_try(op, context)
    if ledger.durable or ledger.submission_key or ledger.job_name or ledger.race:
        return None
    if not isinstance(tried, int) or first is None or tried <= first:  # the first try since a clear: a new run
        return None
    identity = labels(op, context, None)
    flt = identity_filter(identity)
    positions = op.positions()
    found: list[Any] = []
    for location in dict.fromkeys(location for _, location in positions):
        found.extend(op.job_kind.view(r) for r in op.job_kind.list_all(op.client(location), flt, 50))
    chosen = choose(found, identity, tried, first, len(positions))
    live = [j.name for j in found if not j.is_terminal()]
    if chosen is None:
        if len(live) > 1:
            op.log.warning("retry: %d live jobs of earlier tries (%s): none adopted, a race is not re-attached "
                           "on this Airflow (docs/compatibility.md)", len(live), ", ".join(live))
        return None
    job, position = chosen
    ledger.adopt((job.labels or {})[SUBMISSION_LABEL], position)
    op.log.info("retry: re-attaching to %s, submitted by try %s (found by its labels: this Airflow keeps no "
                "ledger across tries)", job.name, (job.labels or {}).get("airflow-try"))
    return job.name
