"""A failed job's last log lines, read from Cloud Logging by the operator (sync client): the
failing replica (:func:`log_lines.failing_replica` over the job's ERROR lines), then that
replica's last ``lines`` lines. Two ``entries:list`` calls, only when a job FAILED.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_gpu_sched.orchestration.log_lines import failing_replica, failure_tail
from airflow_gpu_sched.vertex import cloud_logging

log = logging.getLogger(__name__)
ERROR_LINES = 20  # the newest ERROR lines the failing replica is told from


def read_failure_tail(client: Any, job_name: str, lines: int) -> str | None:
    """``last N log line(s) of workerpool0-0:\\n  [workerpool0-0 ERROR] ...``, or None (no
    lines, or Cloud Logging not readable: the failure is reported without them)."""
    from airflow_gpu_sched.vertex.client import VertexError

    project, job_id = job_name.split("/")[1], cloud_logging.job_id_of(job_name)
    try:
        errors = client.list_log_entries_page(cloud_logging.jobs_filter([job_id], min_severity="ERROR"),
                                              ERROR_LINES, order_by="timestamp desc", project=project).entries
        replica = failing_replica(errors)
        page = client.list_log_entries_page(cloud_logging.jobs_filter([job_id], replica=replica), lines,
                                            order_by="timestamp desc", project=project)
    except VertexError as exc:
        log.warning("the failed job's log lines could not be read from Cloud Logging: %s", exc)
        return None
    return failure_tail(replica, page.entries, lines)
