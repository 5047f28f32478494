"""Cloud Logging (logging v2) as Vertex AI training writes to it: the ``entries:list`` shapes,
the filter that picks a job's lines, and how to read a line (replica, severity, text).

What Google says (docs/fidelity.md, "Cloud Logging"):
- ``POST https://logging.googleapis.com/v2/entries:list`` takes a ``ListLogEntriesRequest``
  body (``resourceNames``, ``filter``, ``orderBy`` "timestamp asc"|"timestamp desc",
  ``pageSize`` default 50, ``pageToken``) and answers ``{"entries": [LogEntry], "nextPageToken"}``
  (logging v2 discovery document, revision 20260911). An empty page WITH a token means "not
  done searching": call again with it.
- Entries with the same ``logName`` and ``timestamp`` are ordered by ``insertId``, and an entry
  with the same timestamp and insertId as another is a duplicate (LogEntry.insert_id).
- A filter is at most 20,000 characters (ListLogEntriesRequest.filter; quotas page).
- Vertex AI custom jobs log under ``resource.type="ml_job"`` with ``resource.labels.job_id`` =
  the numeric job id (the filter in a failed job's own error text; ``gcloud ai custom-jobs
  stream-logs``), the replica in ``resource.labels.task_name`` (``workerpool0-0``, ...; older
  entries: ``labels."ml.googleapis.com/task_name"``), read in that order as gcloud reads them.

May import: vertex; never airflow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

ML_JOB = "ml_job"
FILTER_LIMIT = 20_000  # characters (ListLogEntriesRequest.filter, Cloud Logging quotas page)
ENTRIES_LIST_PER_MINUTE = 60  # entries.list requests per minute per project (Cloud Logging quotas page)
MAX_PAGE_SIZE = 1000  # the largest pageSize the API takes (LogEntry proto, page_size; assumed since)
TASK_LABEL = "ml.googleapis.com/task_name"
# Vertex's own entries about a job's state (log ``ml.googleapis.com%2F<job_id>``, replica
# ``service``): the label is observed (GoogleCloudPlatform/cortex-data-foundation#42); its values
# are assumed to be the state's name, with or without ``JOB_STATE_``
JOB_STATE_LABEL = "ml.googleapis.com/job_state"
SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              defer_build=True)


class MonitoredResource(_Model):
    type: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class LogEntry(_Model):
    """The fields of a LogEntry a task log shows (others are ignored)."""

    log_name: str = ""
    resource: MonitoredResource = Field(default_factory=MonitoredResource)
    timestamp: str = ""
    receive_timestamp: str | None = None
    severity: str = "DEFAULT"
    insert_id: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    text_payload: str | None = None
    json_payload: dict[str, Any] | None = None

    @property
    def job_id(self) -> str:
        return self.resource.labels.get("job_id", "")

    @property
    def replica(self) -> str:
        """``workerpool0-0``: where gcloud reads it, in its order; ``service`` for Vertex's own lines."""
        attrs = (self.json_payload or {}).get("attrs")
        return (self.resource.labels.get("task_name") or self.labels.get("task_name")
                or self.labels.get(TASK_LABEL) or (attrs.get("tag") if isinstance(attrs, dict) else None)
                or "unknown_task")

    @property
    def job_state(self) -> str | None:
        """``JOB_STATE_RUNNING`` for a service entry labelled with the job's state, else None."""
        value = (self.labels.get(JOB_STATE_LABEL) or "").strip().upper()
        if not value:
            return None
        return value if value.startswith("JOB_STATE_") else f"JOB_STATE_{value}"

    @property
    def message(self) -> str:
        """The text: ``textPayload``, or ``jsonPayload.message`` (gcloud's reading)."""
        if self.text_payload is not None:
            return self.text_payload
        if self.json_payload is not None:
            return str(self.json_payload.get("message", ""))
        return ""

    @property
    def key(self) -> tuple[str, str]:
        """(timestamp, insertId): the order Cloud Logging returns, and identity (duplicates)."""
        return timestamp_key(self.timestamp), self.insert_id

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ListLogEntriesResponse(_Model):
    entries: list[LogEntry] = Field(default_factory=list)
    next_page_token: str | None = None


_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


def timestamp_key(text: str) -> str:
    """An RFC 3339 timestamp (nanoseconds, any offset) as ``...T..:..:..nnnnnnnnnZ`` in UTC:
    such keys sort as the instants do (a string compare), unlike the texts themselves."""
    found = _TS.match(text or "")
    if not found:
        return text or ""
    whole, fraction, zone = found.groups()
    if zone != "Z":
        moment = datetime.fromisoformat(whole + zone).astimezone(timezone.utc)
        whole = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{(fraction or '').ljust(9, '0')}Z"


def format_log_time(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job_id_of(job_name: str) -> str:
    """``projects/P/locations/L/customJobs/123`` -> ``123`` (tuning jobs and pipelines: their id)."""
    return job_name.rstrip("/").rsplit("/", 1)[-1]


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jobs_filter(job_ids: Sequence[str], since: str | None = None, replica: str | None = None,
                min_severity: str | None = None) -> str:
    """``resource.type="ml_job" AND resource.labels.job_id=("1" OR "2") AND timestamp>="..."``."""
    if not job_ids:
        raise ValueError("jobs_filter needs at least one job id")
    ids = (_quoted(job_ids[0]) if len(job_ids) == 1
           else "(" + " OR ".join(_quoted(i) for i in job_ids) + ")")
    parts = [f'resource.type="{ML_JOB}"', f"resource.labels.job_id={ids}"]
    if replica:
        parts.append(f"resource.labels.task_name={_quoted(replica)}")
    if min_severity:
        parts.append(f"severity>={min_severity}")
    if since:
        parts.append(f"timestamp>={_quoted(since)}")
    return " AND ".join(parts)


def batches(job_ids: Iterable[str], since: str | None = None, limit: int = FILTER_LIMIT) -> list[list[str]]:
    """The job ids split so that each batch's :func:`jobs_filter` stays within ``limit`` characters."""
    out: list[list[str]] = []
    size = 0
    for job_id in job_ids:
        if out:  # the filter grows by ' OR "<id>"', plus the group's parentheses at its second id
            grown = size + len(_quoted(job_id)) + 4 + (2 if len(out[-1]) == 1 else 0)
            if grown <= limit:
                out[-1].append(job_id)
                size = grown
                continue
        size = len(jobs_filter([job_id], since))
        if size > limit:
            raise ValueError(f"job id {job_id!r} alone makes a filter longer than {limit} characters")
        out.append([job_id])
    return out


def list_request(project: str, filter_text: str, page_size: int = MAX_PAGE_SIZE, page_token: str | None = None,
                 order_by: str = "timestamp asc") -> dict[str, Any]:
    """The ``ListLogEntriesRequest`` body."""
    body: dict[str, Any] = {"resourceNames": [f"projects/{project}"], "filter": filter_text,
                            "orderBy": order_by, "pageSize": page_size}
    if page_token:
        body["pageToken"] = page_token
    return body
