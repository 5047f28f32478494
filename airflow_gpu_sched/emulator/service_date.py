"""Every answer's ``Date`` header says the emulated time, as Google's front end says its own.

Real Vertex AI (every Google API) sends ``Date`` on every answer, errors included, in the
IMF-fixdate form (RFC 9110 section 6.6.1). The emulator's clock runs ``--speed`` times faster
than real time and moves on ``clock:advance``: its ``Date`` is that emulated time, so a client
that counts durations in the service's time (vertex/service_clock.py) counts the emulator's.
uvicorn's own ``date`` header (the wall clock) is off (emulator/server.py); any other ``date``
an answer carries is replaced here, so an answer has exactly one.

May import: emulator; never airflow.
"""

from __future__ import annotations

from email.utils import formatdate
from typing import Any, Callable


class ServiceDate:
    """ASGI middleware: ``date: <clock.now()>`` on every HTTP answer (``clock`` read per answer:
    a reset gives the backend a new clock)."""

    def __init__(self, app: Any, clock: Callable[[], Any]):
        self.app, self.clock = app, clock

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_dated(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"date"]
                when = formatdate(self.clock().now().timestamp(), usegmt=True).encode("ascii")
                message = {**message, "headers": [*headers, (b"date", when)]}
            await send(message)

        await self.app(scope, receive, send_dated)
