"""Tiny trigger for tests/test_airflow_harness.py.

dag.test() re-creates a deferred task's trigger from its class path
(``import_string(classpath)(**kwargs)``), so test triggers must live in an importable module.
"""

from __future__ import annotations

from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Calls observed in this process, e.g. ("run", ...), ("cleanup",), ("on_kill",), ("run_exit",).
CALLS: list[tuple[Any, ...]] = []


class EchoTrigger(BaseTrigger):
    """Yields one event echoing ``payload`` (plus the host of ``conn_id`` read with aget_connection)."""

    def __init__(self, payload: Any = None, conn_id: str | None = None):
        super().__init__()
        self.payload = payload
        self.conn_id = conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"payload": self.payload, "conn_id": self.conn_id}

    async def run(self):
        CALLS.append(("run", self.payload))
        try:
            event: dict[str, Any] = {"payload": self.payload}
            if self.conn_id:
                from airflow.sdk import BaseHook

                conn = await BaseHook.aget_connection(self.conn_id)
                event["conn"] = {"host": conn.host, "extra": conn.extra_dejson}
            yield TriggerEvent(event)
        finally:
            CALLS.append(("run_exit",))

    async def cleanup(self) -> None:
        CALLS.append(("cleanup",))

    async def on_kill(self) -> None:
        CALLS.append(("on_kill",))
