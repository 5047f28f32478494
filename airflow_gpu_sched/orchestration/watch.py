"""What a poller remembers about one job between polls; shared by triggers and sync mode.

It turns each poll into at most one log line (a state change, with the time spent in the
previous state), counts the service's SPOT restarts it can see (RUNNING -> QUEUED/PENDING),
and keeps the transient-error window: API errors are tolerated until ``window`` seconds have
passed since the last successful poll.

May import: vertex; airflow.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_gpu_sched.vertex.models import CustomJob, JobState

_BACK_TO_WAITING = {JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_PENDING}

TRANSIENT_ERROR_WINDOW = 600.0  # seconds of failing polls tolerated before "Vertex unreachable"


class JobWatch:
    def __init__(self, job_name: str, transient_error_window: float = TRANSIENT_ERROR_WINDOW,
                 clock=time.monotonic, observed_restarts: int = 0):
        self.job_name = job_name
        self.window = transient_error_window
        self.clock = clock
        self.state: JobState | None = None
        self.since = clock()
        self.last_ok = clock()
        self.observed_restarts = observed_restarts
        self.failures = 0

    def succeeded_poll(self) -> None:
        self.last_ok, self.failures = self.clock(), 0

    def observe(self, job: CustomJob) -> str | None:
        """Record a successful poll; returns a log line when the state changed."""
        self.succeeded_poll()
        now = self.last_ok
        if job.state == self.state:
            return None
        line = f"{self.job_name}: {job.state.value if job.state else '?'}"
        if self.state is not None:
            line += f" after {now - self.since:.0f}s in {self.state.value}"
            if self.state is JobState.JOB_STATE_RUNNING and job.state in _BACK_TO_WAITING:
                self.observed_restarts += 1
                line += f" (preempted; service restart #{self.observed_restarts})"
        self.state, self.since = job.state, now
        return line

    def failed_poll(self, error: Exception) -> bool:
        """Record a failed poll; True while still inside the transient-error window."""
        self.failures += 1
        return self.clock() - self.last_ok < self.window

    def unreachable_message(self, error: Any) -> str:
        return (f"Vertex AI unreachable: polls of {self.job_name} failed for "
                f"{self.clock() - self.last_ok:.0f}s (transient-error window {self.window:.0f}s, "
                f"{self.failures} failures); last error: {error}")


WAITING_TO_RUN = frozenset({JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_PENDING, JobState.JOB_STATE_UNSPECIFIED})


def has_run(job: CustomJob) -> bool:
    """True once the job was RUNNING at least once: ``startTime`` is "the time when the job for
    the first time entered JOB_STATE_RUNNING" (custom_job.proto; the same for tuning jobs and
    pipelines), so a SPOT job back in QUEUED after a restart still counts as started."""
    return job.start_time is not None or job.state is JobState.JOB_STATE_RUNNING


def past_running_bound(job: CustomJob, running_by: float | None, now: float) -> bool:
    """The operator's bound on the time before RUNNING: True when ``running_by`` (epoch seconds)
    has passed and the job has never run and still waits for its resources (QUEUED or PENDING).
    A job that ran once, or is ending anyway, is not the bound's business."""
    return (running_by is not None and now >= running_by and not has_run(job)
            and (job.state or JobState.JOB_STATE_UNSPECIFIED) in WAITING_TO_RUN)
