"""What the operator, its run loop and its race I/O share: running a trigger in the worker, the
clock, the try number, and how many ambiguous creates are reconciled before failing.

May import: vertex; airflow.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

LOOP_CLOSE_SECONDS = 10.0  # for the worker's trigger loop to end its tasks after the first event
AMBIGUOUS_CREATE_ATTEMPTS = 5  # creates whose outcome stayed unknown, each reconciled by label, before failing


def now() -> datetime:
    """The service's time (vertex/service_clock.py): what every duration a user writes counts in."""
    from airflow_gpu_sched.vertex import service_clock

    return service_clock.now_datetime()


def _in_service_time(when: datetime) -> datetime:
    from airflow_gpu_sched.vertex import service_clock

    return service_clock.from_wall(when)


def try_number(context: Any) -> int | None:
    return getattr(context.get("ti"), "try_number", None)


def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger's loop in this process until its first event (``deferrable=False``).

    The loop runs in a thread of its own and this (the main) thread only waits for its result:
    Airflow raises ``execution_timeout``'s AirflowTaskTimeout (SIGALRM) and a kill's exception from
    a signal handler in the main thread, and in a loop running here that exception could land
    inside one of the loop's tasks (the shared poller, a log tail), which keeps it as its result:
    the wait went on after the timeout, the job with it. Waiting on a lock, it lands here."""

    async def _first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError(f"{trigger!r} ended without an event")

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="gpu-sched-trigger-loop", daemon=True)
    thread.start()
    try:
        return asyncio.run_coroutine_threadsafe(_first(), loop).result()
    finally:
        _close_loop(loop, thread)


def _close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """What ``asyncio.run`` does at its end (cancel the tasks left, wait for them), in the loop's
    thread, bounded: a task that ignores its cancel does not keep the task process alive."""

    async def _cancel_the_rest() -> None:
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await loop.shutdown_asyncgens()

    try:
        asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(timeout=LOOP_CLOSE_SECONDS)
    except Exception:  # noqa: BLE001 (a task that would not end: the daemon thread goes with the process)
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=LOOP_CLOSE_SECONDS)
    if not thread.is_alive():
        loop.close()


def deadline(op: Any, context: Any, ledger: Any) -> datetime | None:
    """The plan's deadline. A timedelta counts from the data interval's end; in a manual
    run (``airflow dags test``, a trigger from the UI) whose interval ended long ago, it
    counts from when the task first started instead (kept in the ledger across tries).

    In the service's time (:func:`now`): a datetime and the data interval's end are wall-clock
    instants, taken as the same distance from now there (on Vertex: themselves); the task's
    first start is recorded in service time."""
    if op.deadline is None:
        return None
    if isinstance(op.deadline, datetime):
        return _in_service_time(op.deadline if op.deadline.tzinfo else op.deadline.replace(tzinfo=timezone.utc))
    anchor = context.get("data_interval_end") or context.get("logical_date")
    dag_run = context.get("dag_run")
    if anchor is None or str(getattr(dag_run, "run_type", "")).lower().endswith("manual"):
        return datetime.fromisoformat(ledger.started_at(now())) + op.deadline
    return _in_service_time(anchor) + op.deadline


def execution_deadline(op: Any, context: Any) -> datetime | None:
    """When this try's ``execution_timeout`` ends: its start (Airflow 3 keeps a try's start_date
    across its deferrals) plus the timeout, or None."""
    start = getattr(context.get("ti"), "start_date", None)
    if op.execution_timeout is None or start is None:
        return None
    return (start if start.tzinfo else start.replace(tzinfo=timezone.utc)) + op.execution_timeout


def deferral_timeout(deadline: datetime | None) -> timedelta | None:
    """The ``timeout`` a deferral is given so ``execution_timeout`` holds while the trigger waits:
    Airflow 3 does not apply ``execution_timeout`` to a deferred task (its Execution API drops it;
    apache/airflow#69678), only a deferral's own timeout. At least a second: past the deadline,
    Airflow times the trigger out at its next check and the task resumes only to fail. Airflow's
    own clock, the wall clock (never the service's)."""
    if deadline is None:
        return None
    return max(deadline - datetime.now(timezone.utc), timedelta(seconds=1))
