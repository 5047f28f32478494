"""An opt-in record of every Vertex exchange the emulator serves, for checks against Google's types.

Off by default (it keeps bodies in memory). ``POST /emulator/v1/traffic:start`` clears the record
and starts it, ``POST /emulator/v1/traffic:stop`` stops it, ``GET /emulator/v1/traffic`` returns
``{"recording": bool, "exchanges": [...]}``; a reset stops and clears it. Each exchange:
``{rpc, method, path, query, requestBody, status, responseBody}`` with the bodies as the exact text
sent and answered (``None`` when empty), so that a checker parses what was on the wire, not a
re-encoding of it. Only ``/v1/...`` routes (and Cloud Logging's ``/v2/entries:list``) are recorded;
control routes are not Google's.
Each exchange also says when it was answered (``at``, Unix seconds) and from which TCP peer
(``client``, ``"host:port"``: a test maps ports to the processes that held them, e.g. which
triggerer polled); ``start(bodies=False)`` leaves the bodies out (``None``), for long scale runs.
In process, ``start(on_exchange=f)`` calls ``f(exchange)`` as each is recorded, while the peer's
connection is still open: a sampler of open connections misses one a client opened and closed
between two samples, a lookup at that moment does not.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Awaitable, Callable

from fastapi import Request
from fastapi.responses import Response

Handler = Callable[[Request, str], Awaitable[Response]]
RouteMatcher = Callable[[str, str], "tuple[str, dict[str, str]] | None"]


# A body over MAX_BODY bytes is recorded as None plus ``requestBodyBytes``/``responseBodyBytes``
# (its size); past MAX_EXCHANGES exchanges the record stops growing and counts ``dropped``.
MAX_BODY = 256 * 1024
MAX_EXCHANGES = 100_000


def _text(body: bytes) -> str | None:
    return body.decode("utf-8", "replace") if body and len(body) <= MAX_BODY else None


class TrafficRecorder:
    def __init__(self) -> None:
        self.recording = False
        self.bodies = True
        self.exchanges: list[dict[str, Any]] = []
        self.dropped = 0
        self.on_exchange: Callable[[dict[str, Any]], None] | None = None

    def start(self, bodies: bool = True, on_exchange: Callable[[dict[str, Any]], None] | None = None) -> dict:
        self.recording, self.exchanges, self.bodies, self.dropped = True, [], bodies, 0
        self.on_exchange = on_exchange
        return self.view()

    def stop(self) -> dict:
        self.recording = False
        return self.view()

    def clear(self) -> None:
        self.recording, self.exchanges, self.dropped, self.on_exchange = False, [], 0, None

    def view(self) -> dict:
        return {"recording": self.recording, "exchanges": self.exchanges, "dropped": self.dropped}

    def wrap(self, handler: Handler, match_route: RouteMatcher) -> Handler:
        """``handler`` (the ``/v1/{path}`` route), recording each exchange while recording is on."""

        @functools.wraps(handler)  # FastAPI reads the (request, path) signature through __wrapped__
        async def recorded(request: Request, path: str) -> Response:
            response = await handler(request, path)
            if self.recording and len(self.exchanges) >= MAX_EXCHANGES:
                self.dropped += 1
            elif self.recording:
                found = match_route(request.method, path)
                raw = await request.body() if self.bodies else b""  # Starlette caches it: the handler's read is reused
                answer = bytes(response.body) if self.bodies and response.body else b""
                peer = request.client
                exchange = {
                    "rpc": found[0] if found else None, "method": request.method, "path": path,
                    "query": list(request.query_params.multi_items()),
                    "requestBody": _text(raw), "status": response.status_code, "responseBody": _text(answer),
                    "at": time.time(), "client": f"{peer.host}:{peer.port}" if peer else None,
                }
                for key, body in (("requestBody", raw), ("responseBody", answer)):
                    if len(body) > MAX_BODY:  # kept out: a recording holds no huge body
                        exchange[key + "Bytes"] = len(body)
                self.exchanges.append(exchange)
                if self.on_exchange is not None:
                    self.on_exchange(exchange)
            return response

        return recorded
