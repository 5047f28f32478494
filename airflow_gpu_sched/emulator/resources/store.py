"""What every resource of the emulator shares: the scenario, the emulated clock, the random
source, ids, creation order, stats, the custom job records, and the event queue.

The emulator is a discrete-event simulation: every change is an event at the emulated time it
happens (admission, provisioning done, run done, preemption, wait expiry, ...). A resource
registers a handler per event kind (:meth:`Store.on`); :meth:`Store.run_due` applies every event
due by "now" in time order, each at its own time, before a request is answered.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from airflow_gpu_sched.emulator.api_errors import ApiError, violations_error
from airflow_gpu_sched.emulator.clock import MAX_ELAPSED, EmulatedClock
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.scenario import Scenario
from airflow_gpu_sched.vertex.models import RPC_STATUS, Status
from airflow_gpu_sched.vertex.rules import parse_violations

ERROR_DOMAIN = "aiplatform.googleapis.com"
ANY_EPOCH = -1  # an event that fires whatever transitions happened since it was scheduled
# Recorded real traffic: startTime is set ~130-150 ms after createTime, at admission, while the
# job is still PENDING/QUEUED (variant startTime: admission, the default; docs/fidelity.md).
ADMISSION_START = timedelta(seconds=0.14)
CANCELED = "CANCELED"  # the message of a cancelled job's error (code 1)

Handler = Callable[[str, int, datetime], None]  # (key, epoch, when)


def error_status(code_name: str, message: str, reason: str | None = None) -> Status:
    """A google.rpc.Status, with an ErrorInfo of ``reason`` when there is one."""
    details = None
    if reason:
        details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                    "domain": ERROR_DOMAIN}]
    return Status(code=RPC_STATUS[code_name][0], message=message, details=details)


def cancelled_status() -> Status:
    return Status(code=1, message=CANCELED)


def parse_valid(cls: Any, body: dict, check: Callable[..., list], *args: Any) -> Any:
    """A request body as the pydantic model ``cls`` that ``check`` (a ``vertex.rules`` check, with
    ``args``) finds nothing wrong with, or the 400 naming each bad field and its rule."""
    try:
        parsed = cls.model_validate(body)
    except ValidationError as exc:
        raise violations_error(parse_violations(exc)) from None
    found = check(parsed, *args)
    if found:
        raise violations_error(found)
    return parsed


def find(records: dict[str, Any], name: str, not_found: str) -> Any:
    """The record of ``name``, or a 404 with Google's ``not_found`` message."""
    record = records.get(name)
    if record is None:
        raise ApiError("NOT_FOUND", not_found)
    return record


def refuse_unless_ended(kind: str, name: str, state: Any) -> None:
    """Delete's rule for every job kind: only an ended one may be deleted."""
    if not state.is_terminal():
        raise ApiError("FAILED_PRECONDITION", f"{kind} {name} is in state {state.value}; "
                                              "cancel it and wait for it to end before deleting it.")


def cancel_wanted(kind: str, name: str, state: Any, cancelling: Any, variant: str) -> bool:
    """Cancel's rule for every job kind: True when the cancel has work to do (the job neither
    ended nor ``cancelling`` already). A cancel of an ended job does nothing under variant
    ``cancelEnded: noop`` and is refused otherwise (the default)."""
    if not state.is_terminal():
        return state is not cancelling
    if variant == "noop":
        return False
    raise ApiError("FAILED_PRECONDITION", f"Cannot cancel {kind} {name}: it is already in state {state.value}.")


def history_view(history: Iterable[tuple[str, datetime]]) -> list[dict]:
    return [{"state": s, "time": t.isoformat()} for s, t in history]


class Store:
    """Shared state of one emulator run (a reset makes a new one). Not thread-safe: the HTTP app
    calls it from one event loop."""

    def __init__(self, scenario: Scenario, executor: Any = None):
        self.scenario = scenario
        self.executor = executor  # --execute: runs each job's command (emulator/executor.py)
        self.clock = EmulatedClock(scenario.speed)
        self.rng = random.Random(scenario.seed)
        self.jobs: dict[str, JobRecord] = {}  # every custom job, in creation order
        self.job_failures = list(scenario.job_failures)  # injected: the next jobs created take one each
        self.stats: dict[str, Any] = {"requests": {}, "faultsInjected": 0, "jobsCreated": {},
                                      "preemptions": 0, "serviceRestarts": 0, "cancels": 0}
        self._seq = itertools.count()
        self._ids = itertools.count(1_000_000_000_000_000_001)
        self._events: list[tuple[datetime, int, str, str, int]] = []
        self._event_seq = itertools.count()
        self._handlers: dict[str, Handler] = {}
        # Told when capacity may have come free (a resource ready, a quota raised): waiting jobs
        # may go. Set by the custom jobs' life cycle (runs.py), which owns the queue.
        self.freed: Callable[[datetime], None] = lambda when: None

    def new_id(self) -> int:
        return next(self._ids)

    def next_seq(self) -> int:
        """Creation order across every collection (list pages use it)."""
        return next(self._seq)

    def bump(self, counter: str) -> None:
        self.stats[counter] = self.stats.get(counter, 0) + 1

    # ------------------------------------------------------------------ events

    def on(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    def schedule(self, when: datetime, kind: str, key: str, epoch: int = 0) -> None:
        heapq.heappush(self._events, (when, next(self._event_seq), kind, key, epoch))

    def schedule_after(self, when: datetime, seconds: float, kind: str, key: str, epoch: int = 0) -> None:
        """An event ``seconds`` after ``when``; none past the clock's horizon (MAX_ELAPSED: it never
        comes), so a request's duration up to protobuf's 10,000 years never overflows a datetime."""
        if seconds <= MAX_ELAPSED:
            self.schedule(when + timedelta(seconds=seconds), kind, key, epoch)

    def run_due(self, now: datetime) -> None:
        """Apply every event due by ``now``, in time order, each at its own time."""
        while self._events and self._events[0][0] <= now:
            when, _, kind, key, epoch = heapq.heappop(self._events)
            self._handlers[kind](key, epoch, when)
