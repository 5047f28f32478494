"""What a poller remembers about one job between polls; shared by triggers and sync mode.

It turns each poll into at most one log line (a state change, with the time spent in the
previous state), counts the service's SPOT restarts it can see (RUNNING -> QUEUED/PENDING),
and keeps the transient-error window: API errors are tolerated until ``window`` seconds have
passed since the last successful poll.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_gpu_sched.orchestration import state_times
from airflow_gpu_sched.vertex import service_clock
from airflow_gpu_sched.vertex.defaults import TRANSIENT_ERROR_WINDOW  # noqa: F401 (its home for the watchers)
from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import CustomJob

_BACK_TO_WAITING = {JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_PENDING}



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
        self.times = state_times.new()  # each state change as first seen (orchestration/state_times.py)

    def succeeded_poll(self) -> None:
        self.last_ok, self.failures = self.clock(), 0

    def observe(self, job: CustomJob) -> str | None:
        """Record a successful poll; returns a log line when the state changed."""
        self.succeeded_poll()
        now = self.last_ok
        state_times.note(self.times, job, service_clock.now())  # the service's time, as its updateTime
        if job.state == self.state:
            return None
        line = f"{self.job_name}: {job.state.value if job.state else '?'}"
        if not state_times.is_known(job.state):  # logged once: a state change is logged once
            line += (" (a state this version does not know: taken as waiting, so capacity_wait_timeout and the "
                     "deadline apply to it)")
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


def has_run(job: CustomJob, times: dict[str, Any] | None = None) -> bool:
    """True once the job was seen RUNNING (or ended SUCCEEDED), so a SPOT job back in QUEUED after
    a restart still counts as started. Never from ``startTime``: real Vertex sets it at
    admission, while the job still waits (state_times.py)."""
    return state_times.has_run(job, times)


def past_running_bound(job: CustomJob, times: dict[str, Any] | None, running_by: float | None, now: float) -> bool:
    """The operator's bound on the time before RUNNING: True when ``running_by`` (epoch seconds)
    has passed and the job was never seen RUNNING and still waits for its resources (QUEUED or
    PENDING), even with a ``startTime``. A job that ran once, or is ending anyway, is not the
    bound's business."""
    return state_times.past_running_bound(job, times, running_by, now)
