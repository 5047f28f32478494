"""A failed job's last log lines, read from Cloud Logging by the operator (sync client): the
failing replica (:func:`log_lines.failing_replica` over the job's ERROR lines), then that
replica's last ``lines`` lines. Two reads of ``entries:list`` (each paging on through empty pages), only
when a job FAILED.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_gpu_sched.orchestration.log_lines import failing_replica, failure_tail
from airflow_gpu_sched.vertex import cloud_logging

log = logging.getLogger(__name__)
ERROR_LINES = 20  # the newest ERROR lines the failing replica is told from
MAX_CALLS = 5  # entries:list calls for one read: an empty page with a token means "keep searching"


def read_failure_tail(client: Any, job_name: str, lines: int) -> str | None:
    """``last N log line(s) of workerpool0-0:\\n  [workerpool0-0 ERROR] ...``, or None (no
    lines, or Cloud Logging not readable: the failure is reported without them)."""
    from airflow_gpu_sched.vertex.client import VertexError

    project, job_id = job_name.split("/")[1], cloud_logging.job_id_of(job_name)
    try:
        errors = _newest(client, cloud_logging.jobs_filter([job_id], min_severity="ERROR"), ERROR_LINES, project)
        replica = failing_replica(errors)
        tail = _newest(client, cloud_logging.jobs_filter([job_id], replica=replica), lines, project)
    except VertexError as exc:
        log.warning("the failed job's log lines could not be read from Cloud Logging: %s", exc)
        return None
    return failure_tail(replica, tail, lines)


def _newest(client: Any, flt: str, want: int, project: str) -> list[Any]:
    """Up to ``want`` entries, newest first. Cloud Logging may answer an empty or short page with a
    nextPageToken ("keep searching", ListLogEntriesResponse.next_page_token), so read on until
    enough, or no token, or :data:`MAX_CALLS` calls."""
    found: list[Any] = []
    token = None
    for _ in range(MAX_CALLS):
        page = client.list_log_entries_page(flt, want - len(found), token, order_by="timestamp desc", project=project)
        found += page.entries
        if len(found) >= want or not (token := page.next_page_token):
            break
    return found[:want]
