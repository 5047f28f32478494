"""What the operator, its run loop and its race I/O share: running a trigger in the worker, the
clock, the try number, and how many ambiguous creates are reconciled before failing.

May import: nothing of this package; airflow.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

AMBIGUOUS_CREATE_ATTEMPTS = 5  # creates whose outcome stayed unknown, each reconciled by label, before failing


def now() -> datetime:
    return datetime.now(timezone.utc)


def try_number(context: Any) -> int | None:
    return getattr(context.get("ti"), "try_number", None)


def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger's loop in this process until its first event (``deferrable=False``)."""

    async def _first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError(f"{trigger!r} ended without an event")

    return asyncio.run(_first())


def deadline(op: Any, context: Any, ledger: Any) -> datetime | None:
    """The plan's deadline. A timedelta counts from the data interval's end; in a manual
    run (``airflow dags test``, a trigger from the UI) whose interval ended long ago, it
    counts from when the task first started instead (kept in the ledger across tries)."""
    if op.deadline is None:
        return None
    if isinstance(op.deadline, datetime):
        return op.deadline if op.deadline.tzinfo else op.deadline.replace(tzinfo=timezone.utc)
    anchor = context.get("data_interval_end") or context.get("logical_date")
    dag_run = context.get("dag_run")
    if anchor is None or str(getattr(dag_run, "run_type", "")).lower().endswith("manual"):
        anchor = datetime.fromisoformat(ledger.started_at(now()))
    return anchor + op.deadline


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
    Airflow times the trigger out at its next check and the task resumes only to fail."""
    if deadline is None:
        return None
    return max(deadline - now(), timedelta(seconds=1))
