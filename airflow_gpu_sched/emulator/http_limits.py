"""The emulator's HTTP/1.1 connections, bounded below the app (uvicorn's httptools protocol, which
caps neither): a request head over MAX_HEAD_BYTES is refused with a 431 before it is buffered, a
head that does not arrive within HEAD_TIMEOUT_SECONDS gets a 408 (slowloris), and every close
the server starts lingers: the answer is sent, the write side shut, and what the client still
sends is read and dropped for a while, so a client that sends a refused body in full reads the
answer instead of a connection reset. docs/security.md lists each limit.

May import: emulator; never airflow.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Google's front end takes heads up to about 64 KiB (assumed from the common 8 KiB per line / 64 KiB
# total of HTTP servers; no public figure): the emulator refuses a bigger one before buffering it.
MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_SECONDS = 10.0  # from the connection's (or the request's) first byte to its head's end
LINGER_SECONDS = 5.0  # a closing connection drops what the client still sends, at most this long
_END = b"\r\n\r\n"


def _answer(code: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "status": "INVALID_ARGUMENT"}},
                      separators=(",", ":")).encode()
    return (f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: ``close()`` shuts the write side and lets
    the protocol drop the rest of the client's data before the real close (no reset)."""

    def __init__(self, transport: asyncio.Transport, protocol: LimitedHttpProtocol):
        self._transport, self._protocol = transport, protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()

    def close(self) -> None:
        self._protocol.linger()


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a capped, timed request head and lingering closes."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout = HEAD_TIMEOUT_SECONDS
    linger_seconds = LINGER_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.lingering, self._raw = False, transport
        self._in_head, self._head_bytes, self._tail = True, 0, b""
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._start_head_timer()

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.lingering:
            self._refuse(408, "Request Timeout", f"The request head did not arrive within {self.head_timeout:g} "
                                                 "seconds (the emulator's limit).")

    def _refuse(self, code: int, reason: str, message: str) -> None:
        if not self._raw.is_closing():
            self._raw.write(_answer(code, reason, message))
        self.linger()

    def linger(self) -> None:
        """Shut the write side, drop what comes, close at the client's EOF or after linger_seconds."""
        if self.lingering:
            return
        self.lingering = True
        self._stop_head_timer()
        self._unset_keepalive_if_required()
        if self._raw.is_closing():
            return
        try:
            if self._raw.can_write_eof():
                self._raw.write_eof()
        except (OSError, RuntimeError):
            self._raw.close()
            return
        if not self._raw.is_reading():
            self._raw.resume_reading()  # uvicorn paused it while the app left the body unread
        self._linger_timer = self.loop.call_later(self.linger_seconds, self._raw.close)

    def shutdown(self) -> None:
        # the server stops: an idle connection (no request under way) closes at once, no linger
        if self.cycle is None or self.cycle.response_complete:
            self._raw.close()
        else:
            super().shutdown()

    def timeout_keep_alive_handler(self) -> None:
        self._raw.close()  # idle between requests: nothing of the client's to drop

    def eof_received(self) -> bool | None:
        if self.lingering:
            self._raw.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # read and dropped: the answer is already on its way
        if self._in_head:
            self._start_head_timer()
            seen = self._head_bytes + len(data)
            if seen > self.max_head_bytes:
                end = (self._tail + data).find(_END)  # the head's end, if it is in this chunk
                head = self._head_bytes - len(self._tail) + end + len(_END) if end >= 0 else seen
                if head > self.max_head_bytes:
                    self._refuse(431, "Request Header Fields Too Large",
                                 f"The request head is over {self.max_head_bytes} bytes (the emulator's limit).")
                    return
            self._head_bytes, self._tail = seen, (self._tail + data)[-(len(_END) - 1):]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._tail = True, 0, b""  # the next request's head, if any

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "Bad Request", f"{msg} (the HTTP parser refused it)")


def limited_protocol(max_head_bytes: int = MAX_HEAD_BYTES, head_timeout: float = HEAD_TIMEOUT_SECONDS,
                     linger_seconds: float = LINGER_SECONDS) -> type[LimitedHttpProtocol]:
    """The protocol class for uvicorn.Config(http=...), with these limits."""
    return type("LimitedHttpProtocol", (LimitedHttpProtocol,), {
        "max_head_bytes": max_head_bytes, "head_timeout": head_timeout, "linger_seconds": linger_seconds})
