"""The triggers a training task waits on, built from the operator's arguments (and, for a job,
the ledger's bound on its time before RUNNING and the states a trigger already saw): the job's
and the persistent resource's capacity. A race's trigger is built in :mod:`.race`.

The operator waits on them in one way (``wait_on``): deferred, or the same trigger run in the
worker until its first event.

May import: vertex, orchestration, triggers, operators; airflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration.ledger import SubmissionLedger
    from airflow_gpu_sched.triggers import CustomJobTrigger, PersistentCapacityTrigger


def job_trigger(op: Any, ledger: SubmissionLedger, job_name: str) -> CustomJobTrigger:
    """The job's trigger, under the ledger's bound on its time before RUNNING."""
    from airflow_gpu_sched.triggers import CustomJobTrigger

    running_by, why = ledger.running_bound
    stream_logs, masked = op.stream_logs, None
    if stream_logs:  # the trigger cuts what the masker here hides: told where, never what
        from airflow_gpu_sched.operators.job_logs import masked_places

        masked = masked_places(op, job_name)
        stream_logs = masked is not None
    return CustomJobTrigger(job_name, op.gcp_conn_id, op.poll_interval, op.transient_error_window,
                            running_by=running_by, bound_reason=why, impersonation_chain=op.impersonation_chain,
                            stream_logs=stream_logs, log_lines_per_minute=op.log_lines_per_minute,
                            observed=ledger.observed(job_name), masked=masked)


def capacity_trigger(op: Any, resource_name: str, job_spec_json: dict[str, Any],
                     wait: timedelta | None) -> PersistentCapacityTrigger:
    """Free replicas on the persistent resource for the job's pools, for at most ``wait``."""
    from airflow_gpu_sched.triggers import PersistentCapacityTrigger

    from airflow_gpu_sched.vertex import service_clock

    deadline = service_clock.now() + wait.total_seconds() if wait is not None else None  # the service's time
    return PersistentCapacityTrigger(resource_name, job_spec_json, deadline, op.gcp_conn_id, op.poll_interval,
                                     op.transient_error_window, impersonation_chain=op.impersonation_chain)
