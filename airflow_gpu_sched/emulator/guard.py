"""The emulator's front door (an ASGI middleware ahead of every route): who may talk to it and in
what form, checked before a route reads a byte of the body. docs/security.md says why each.

- ``Host`` must name this machine (localhost, *.localhost, 127.0.0.0/8, ::1) and an ``Origin``,
  if sent, a page of this machine: a web page that rebinds its own DNS name to 127.0.0.1 sends its
  own name (DNS rebinding). ``allow_remote`` turns both checks off.
- POST/PATCH/PUT need ``Content-Type: application/json`` (the OAuth/STS token endpoints:
  ``application/x-www-form-urlencoded``, as Google's): a browser sends ``text/plain``, form or
  body-less POSTs to any host without asking (no CORS preflight); JSON it sends only after a
  preflight the emulator never grants.
- A body over MAX_BODY_BYTES is refused unread (Content-Length) or once a chunked one passes it;
  one over MAX_FRONT_END_BODY_BYTES (Content-Length) gets the edge's 413.
- With a control token, ``/emulator/v1/...`` needs ``X-Emulator-Control-Token`` (the dashboard
  and ``timeline.svg`` stay open: read-only views).

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from airflow_gpu_sched.emulator.limits import MAX_BODY_BYTES, MAX_FRONT_END_BODY_BYTES

CONTROL_HEADER = "X-Emulator-Control-Token"
_CONTROL_HEADER = CONTROL_HEADER.lower().encode()
_FORM_ROUTES = {"/token", "/v1/token"}  # OAuth token endpoint and STS: form bodies, as Google's
_OPEN_CONTROL = {"/emulator/v1/timeline.svg"}
_BODY_METHODS = {"POST", "PATCH", "PUT"}

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def is_loopback_name(host: str) -> bool:
    """localhost (and *.localhost, which browsers resolve to loopback themselves), 127.0.0.0/8, ::1."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` -> ``::1``)."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _origin_ok(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and is_loopback_name(parts.hostname or "")
    except ValueError:
        return False


class _TooLarge(Exception):
    pass


def _refusal(code: int, status: str, message: str) -> tuple[int, bytes]:
    body = {"error": {"code": code, "message": message, "status": status}}
    return code, json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


@dataclass
class GuardSettings:
    allow_remote: bool = False
    control_token: str | None = field(default=None, repr=False)


class Guard:
    """The middleware; its settings are ``app.state.guard`` (a :class:`GuardSettings`)."""

    def __init__(self, app: Callable, settings: GuardSettings):
        self.app = app
        self.settings = settings

    def check(self, scope: Scope) -> tuple[int, bytes] | None:
        """The refusal of a request from its head alone, or None."""
        headers: dict[bytes, bytes] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key, value)  # Starlette reads the first of a repeated header too
        method, path = scope["method"], scope["path"]
        if not self.settings.allow_remote:
            host = headers.get(b"host", b"").decode("latin-1")
            if not is_loopback_name(host_of(host)):
                return _refusal(403, "PERMISSION_DENIED", f"Host {host[:100]!r} is not this machine: the "
                                "emulator answers only requests addressed to localhost, 127.0.0.1 or ::1 "
                                "(DNS rebinding). Start it with --allow-remote to serve other names.")
            origin = headers.get(b"origin")
            if origin is not None and not _origin_ok(origin.decode("latin-1")):
                return _refusal(403, "PERMISSION_DENIED", f"Origin {origin.decode('latin-1')[:100]!r} is not a "
                                "page of this machine: the emulator does not serve other sites' pages.")
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and (len(length) > 12 or int(length) > MAX_FRONT_END_BODY_BYTES):
            return _refusal(413, "INVALID_ARGUMENT", f"Request Entity Too Large: the body is over "
                                                     f"{MAX_FRONT_END_BODY_BYTES} bytes (the front end's limit).")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _refusal(400, "INVALID_ARGUMENT", f"Request payload size exceeds the limit: {MAX_BODY_BYTES} bytes.")
        if method in _BODY_METHODS:
            wanted = "application/x-www-form-urlencoded" if path in _FORM_ROUTES else "application/json"
            given = headers.get(b"content-type", b"").decode("latin-1")
            if given.split(";", 1)[0].strip().lower() != wanted:
                return _refusal(400, "INVALID_ARGUMENT", f"Content-Type must be {wanted} for {method} {path[:200]} "
                                f"(got {given[:100]!r}): the body is read as nothing else.")
        token = self.settings.control_token
        if token and path.startswith("/emulator/v1/") and path not in _OPEN_CONTROL:
            if not hmac.compare_digest(headers.get(_CONTROL_HEADER, b""), token.encode()):
                return _refusal(401, "UNAUTHENTICATED", f"The control API needs the {CONTROL_HEADER} header: "
                                "the token the emulator printed when it started.")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(scope)
        if refusal is not None:
            await _send(send, *refusal)
            return
        seen, started = 0, False

        async def counted() -> dict:  # a chunked body has no Content-Length: count as it comes
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    raise _TooLarge
            return message

        async def tracked(message: dict) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await _send(send, *_refusal(400, "INVALID_ARGUMENT",
                                            f"Request payload size exceeds the limit: {MAX_BODY_BYTES} bytes."))


async def _send(send: Send, code: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
