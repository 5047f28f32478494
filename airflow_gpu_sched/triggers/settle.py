"""Hold a trigger's event until the deferral has settled in the scheduler.

Works around an Airflow race (apache/airflow#66374; its variants #67287 and #72716, open on
3.3): the worker that deferred a task exits, and its executor reports "success" for that try. If
the trigger fires and the scheduler re-queues the task (QUEUED, then RUNNING) before it has
processed that stale report, the scheduler fails the try: "reported that the task instance
finished with state success, but the task instance's state attribute is queued". Airflow 3.3
guards only the SCHEDULED state. A busy scheduler (or a Celery result backend read late) took
3 to 27 s to drain the report in those issues' timelines.

A training job rarely ends seconds after its create, but a fast failure (bad image, quota), a
job that was already near its end when a retry re-attached, or a short job can. So a trigger
that runs in a triggerer yields no event sooner than :data:`SETTLE_SECONDS` after it started
there: an event that comes later (every long training) is not delayed at all. ``dag.test()``
runs triggers inline, with no executor to race (``trigger_id`` is None there): no wait.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

SETTLE_SECONDS = 30.0


def started_at(trigger: Any) -> float | None:
    """When the trigger started in a triggerer (monotonic); None when run inline (dag.test())."""
    return time.monotonic() if getattr(trigger, "trigger_id", None) is not None else None


def settle_wait(started: float | None, now: float, settle: float = SETTLE_SECONDS) -> float:
    """Seconds to hold an event that is ready at ``now``: the decision, no I/O."""
    if started is None:
        return 0.0
    return max(0.0, started + settle - now)


async def settle(started: float | None) -> None:
    """Sleep until :data:`SETTLE_SECONDS` after ``started`` (no wait when run inline or already past)."""
    wait = settle_wait(started, time.monotonic(), SETTLE_SECONDS)
    if wait > 0:
        await asyncio.sleep(wait)
