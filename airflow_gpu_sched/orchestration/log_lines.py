"""The job's Cloud Logging lines in the task log: which lines are new, how many a minute may be
written, how a line reads, and which replica's tail explains a failure. Pure: the I/O is the
tailer's (:mod:`airflow_gpu_sched.triggers.log_tail`) and the operator's.

The saved position is the (timestamp, insertId) of the last line written: the next query asks
``timestamp>="<that timestamp>"`` and drops what sorts at or before it (Cloud Logging orders
entries of one timestamp by insertId, and treats same timestamp + insertId as one entry), so a
restart that resumes from a saved position repeats no line and drops none. A line that reaches
Cloud Logging later than lines with later timestamps already written is not shown (ingestion
delay; see docs/fidelity.md).

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu_sched.vertex.cloud_logging import LogEntry, timestamp_key

DEFAULT_LINES_PER_MINUTE = 600
DEFAULT_FAILURE_LINES = 50
SERVICE = "service"  # the replica name Vertex's own lines carry
Redact = Callable[[str], str] | None  # a job's secrets cut from a text (orchestration.redaction.Redactor)
_EXITED = re.compile(r"replica (\S+) exited with a non-zero status")


@dataclass
class LogPosition:
    """After which (timestamp, insertId) lines are new; JSON as ``{"timestamp", "insert_id"}``."""

    timestamp: str | None = None  # as Cloud Logging wrote it (a filter bound)
    insert_id: str = ""

    @property
    def key(self) -> tuple[str, str] | None:
        return None if self.timestamp is None else (timestamp_key(self.timestamp), self.insert_id)

    def to_json(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "insert_id": self.insert_id}

    @classmethod
    def of(cls, data: Any) -> LogPosition:
        if not isinstance(data, dict) or not data.get("timestamp"):
            return cls()
        return cls(str(data["timestamp"]), str(data.get("insert_id") or ""))


def fresh(entries: Iterable[LogEntry], position: LogPosition) -> list[LogEntry]:
    """The entries after ``position``, in Cloud Logging's order, each once."""
    after = position.key
    seen: set[tuple[str, str]] = set()
    out = []
    for entry in sorted(entries, key=lambda e: e.key):
        if (after is not None and entry.key <= after) or entry.key in seen:
            continue
        seen.add(entry.key)
        out.append(entry)
    return out


def advanced(position: LogPosition, written: list[LogEntry]) -> LogPosition:
    return LogPosition(written[-1].timestamp, written[-1].insert_id) if written else position


def task_log_lines(entry: LogEntry, redact: Redact = None) -> list[str]:
    """``[workerpool0-0 INFO] text``, one per line of the entry's message, with ``redact`` (the
    job's secrets cut, :mod:`.redaction`) applied to the whole message first: a value that spans
    lines is cut before the split."""
    prefix = f"[{entry.replica} {entry.severity}]"
    message = redact(entry.message) if redact is not None else entry.message
    return [f"{prefix} {line}" for line in (message.splitlines() or [""])]


@dataclass
class LineBudget:
    """At most ``per_minute`` lines in each minute (from the first line of that minute); what
    is over is skipped and counted, and said when the next minute starts or the job ends."""

    per_minute: int | None
    window_start: float | None = None
    used: int = 0
    skipped: int = 0
    total_skipped: int = field(default=0)

    def admit(self, now: float) -> tuple[bool, str | None]:
        """(write this line?, a note to write first)."""
        note = None
        if self.window_start is None or now - self.window_start >= 60.0:
            note = self.flush()
            self.window_start, self.used = now, 0
        if self.per_minute is not None and self.used >= self.per_minute:
            self.skipped += 1
            return False, note
        self.used += 1
        return True, note

    def flush(self) -> str | None:
        if not self.skipped:
            return None
        note = (f"skipped {self.skipped} job log line(s) over log_lines_per_minute={self.per_minute} "
                "(all of them are in Cloud Logging)")
        self.total_skipped += self.skipped
        self.skipped = 0
        return note


def failing_replica(entries: Iterable[LogEntry]) -> str:
    """The replica a failure is about: the one the service's error names ("The replica
    workerpool1-0 exited with a non-zero status of 1"), else the last replica (not the service)
    that logged at ERROR or above, else ``workerpool0-0``."""
    newest_first = sorted(entries, key=lambda e: e.key, reverse=True)
    for entry in newest_first:
        found = _EXITED.search(entry.message)
        if entry.replica == SERVICE and found:
            return found.group(1)
    for entry in newest_first:
        if entry.replica != SERVICE:
            return entry.replica
    return "workerpool0-0"


def failure_tail(replica: str, entries: Iterable[LogEntry], lines: int, redact: Redact = None) -> str | None:
    """The replica's last ``lines`` lines, as the exception's message shows them (each entry
    through ``redact``); None if none."""
    text = [line for entry in sorted(entries, key=lambda e: e.key) for line in task_log_lines(entry, redact)][-lines:]
    if not text:
        return None
    return f"last {len(text)} log line(s) of {replica}:\n" + "\n".join("  " + line for line in text)
