"""A failed job's last log lines, read from Cloud Logging by the operator (sync client): the
failing replica (:func:`log_lines.failing_replica` over the job's ERROR lines), then that
replica's last ``lines`` lines. Two reads of ``entries:list`` (each paging on through empty pages)
and one GET of the job, only when a job FAILED.

The lines are the job's own output: every value of its env (read from the job as Vertex returns
it, the rule of :mod:`airflow_gpu_sched.orchestration.redaction`) and every value Airflow's
masker knows in this worker (a sensitive Variable, a connection's password) are cut from them
(:func:`job_cut`) before they reach the task log, the exception or the UI's record. A job whose
env cannot be read gets no tail.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_gpu_sched.orchestration.log_lines import failing_replica, failure_tail
from airflow_gpu_sched.vertex import cloud_logging

log = logging.getLogger(__name__)
ERROR_LINES = 20  # the newest ERROR lines the failing replica is told from
MAX_CALLS = 5  # entries:list calls for one read: an empty page with a token means "keep searching"


def read_failure_tail(client: Any, job_name: str, lines: int, cut: Callable[[str], str] | None = None) -> str | None:
    """``last N log line(s) of workerpool0-0:\\n  [workerpool0-0 ERROR] ...``, or None (no
    lines, or Cloud Logging or the job not readable: the failure is reported without them).
    ``cut``: the job's secrets cut (:func:`job_cut`; read here when not given)."""
    from airflow_gpu_sched.vertex.client import VertexError

    project, job_id = job_name.split("/")[1], cloud_logging.job_id_of(job_name)
    try:
        cut = cut or job_cut(client, job_name)
        errors = _newest(client, cloud_logging.jobs_filter([job_id], min_severity="ERROR"), ERROR_LINES, project)
        replica = failing_replica(errors)
        tail = _newest(client, cloud_logging.jobs_filter([job_id], replica=replica), lines, project)
    except VertexError as exc:
        log.warning("the failed job's log lines could not be read (the job or Cloud Logging): %s", exc)
        return None
    return failure_tail(replica, tail, lines, cut)


def job_cut(client: Any, job_name: str) -> Callable[[str], str]:
    """The job's env values (one GET of the job) and what this worker's masker knows, cut from a
    text. A :class:`VertexError` goes to the caller."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.triggers.job_secrets import job_redactor

    resource = job_type_of(job_name).get(client, job_name)
    redactor = job_redactor(resource.to_api() if hasattr(resource, "to_api") else resource)
    return lambda text: masked(redactor(text))


def masked_places(op: Any, job_name: str) -> list[Any] | None:
    """Where in the job's spec (one GET of it) this worker's masker cuts something: the places a
    trigger cuts from the job's log lines (:func:`redaction.masked_spans`), never the texts. None
    (and a warning) when the job cannot be read: its lines are then not streamed."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.orchestration.redaction import masked_spans
    from airflow_gpu_sched.vertex.client import VertexError
    from airflow_gpu_sched.vertex.resource_names import location

    if not _masker_knows_anything():
        return []  # nothing to find: no GET
    try:
        resource = job_type_of(job_name).get(op.client(location(job_name)), job_name)
    except VertexError as exc:
        log.warning("the job's log lines are not streamed to this task log: %s could not be read to learn "
                    "which of its values are masked here: %s", job_name, exc)
        return None
    wire = resource.to_api() if hasattr(resource, "to_api") else resource
    return [[list(path), start, end] for path, start, end in masked_spans(wire, masked)]


def _masker_knows_anything() -> bool:
    try:
        from airflow.sdk._shared.secrets_masker.secrets_masker import _secrets_masker

        return bool(_secrets_masker().patterns)
    except Exception:  # noqa: BLE001 - another Airflow's masker: look at the job
        return True


def masked(text: str) -> str:
    """``text`` as Airflow's masker in this process would write it (nothing outside Airflow)."""
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:
        return text
    found = redact(text)
    return found if isinstance(found, str) else text


def _newest(client: Any, flt: str, want: int, project: str) -> list[Any]:
    """Up to ``want`` entries, newest first. Cloud Logging may answer an empty or short page with a
    nextPageToken ("keep searching", ListLogEntriesResponse.next_page_token), so read on until
    enough, or no token, or :data:`MAX_CALLS` calls."""
    found: list[Any] = []
    token = None
    for _ in range(MAX_CALLS):
        page = client.list_log_entries_page(flt, page_size=want - len(found), page_token=token, order_by="timestamp desc",
                                           project=project)
        found += page.entries
        if len(found) >= want or not (token := page.next_page_token):
            break
    return found[:want]
