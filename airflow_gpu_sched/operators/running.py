"""What the operator and its race I/O (:mod:`.race`) share: running a trigger in the worker,
and how many ambiguous creates are reconciled before failing.

May import: nothing of this package; airflow.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

AMBIGUOUS_CREATE_ATTEMPTS = 5  # creates whose outcome stayed unknown, each reconciled by label, before failing


def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger's loop in this process until its first event (``deferrable=False``)."""

    async def _first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError(f"{trigger!r} ended without an event")

    return asyncio.run(_first())
