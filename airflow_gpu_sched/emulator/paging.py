"""Page sizes and page tokens of the emulator's lists, as AIP-158 (google.aip.dev/158) has them.

* ``pageSize``: unset or 0 → the list's default; above the maximum → coerced to it ("the API
  should coerce down to the maximum permitted page size"); negative → 400 INVALID_ARGUMENT ("the
  API must send an INVALID_ARGUMENT error"); outside int32 → Google's JSON binding 400.
* A page token is bound to every other argument of the call (collection, parent, filter,
  readMask, orderBy): "if any arguments are different, the API should send an INVALID_ARGUMENT
  error". ``pageSize`` is not bound: "If the user changes the page_size in a request for
  subsequent pages, the service must honor the new page size."
* Tokens are opaque ("must not be user-parseable"): the position plus a digest of the arguments,
  signed with a key of this emulator process. Anything else (garbage, a forged or edited token,
  huge numbers like ``1e999``, deep JSON, over :data:`MAX_TOKEN_LENGTH` characters) is a 400,
  never a 500: only a token this process signed is ever parsed. A token does not survive a
  restart of the emulator (AIP-158 lets tokens expire).
* Short pages (scenario ``variants.listPages: short``): "The API may return fewer results than
  the number requested (including zero results), even if not at the end of the collection." The
  first page is empty with a token; each later page looks at no more than half the page size of
  the collection (so a selective filter gives empty pages), until the end, where the token is
  left out ("the only way to communicate end-of-collection").

May import: emulator; never airflow.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from typing import Any

from airflow_gpu_sched.emulator.api_errors import ApiError

__all__ = ["MAX_TOKEN_LENGTH", "coerce_page_size", "decode_token", "encode_token", "offset_page", "parse_page_size",
           "short_window"]

MAX_TOKEN_LENGTH = 512  # characters; the emulator's tokens are about 90
_INT32 = (-(2**31), 2**31 - 1)
_KEY = secrets.token_bytes(32)  # this process's signing key
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")


def parse_page_size(raw: str | None, field: str = "page_size") -> int | None:
    """A ``pageSize`` query value as an int32, or the 400 Google's JSON binding answers."""
    if raw in (None, ""):
        return None
    text = str(raw).strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,11}", text) or not _INT32[0] <= int(text) <= _INT32[1]:
        raise ApiError("INVALID_ARGUMENT", f"Invalid value at '{field}' (TYPE_INT32), \"{raw}\"")
    return int(text)


def coerce_page_size(size: int | None, default: int, maximum: int) -> int:
    """AIP-158: unset/0 → ``default``; over ``maximum`` → ``maximum``; negative → 400."""
    if size is not None and size < 0:
        raise ApiError("INVALID_ARGUMENT", f"pageSize must not be negative (got {size}).")
    return min(size or default, maximum)


def _digest(binding: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps(binding, default=str).encode()).hexdigest()[:16]


def _mac(body: str) -> str:
    return hmac.new(_KEY, body.encode(), hashlib.sha256).hexdigest()[:32]


def encode_token(position: Any, *binding: Any) -> str:
    """An opaque token for ``position`` (JSON-able), bound to ``binding`` (every other argument)."""
    body = json.dumps([position, _digest(binding)], separators=(",", ":"))
    return base64.urlsafe_b64encode(f"{body}|{_mac(body)}".encode()).decode().rstrip("=")


def decode_token(token: str, *binding: Any, field: str = "pageToken",
                 mismatch: str | None = None) -> Any:
    """The position ``token`` holds, if this process issued it for the same ``binding``; else 400."""
    bad = ApiError("INVALID_ARGUMENT", f"{field} is not a token this list returned.")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or not _TOKEN_CHARS.match(token):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token.rstrip("=")) % 4)).decode("ascii")
    except (ValueError, binascii.Error):
        raise bad from None
    body, sep, mac = raw.rpartition("|")
    if not sep or not hmac.compare_digest(mac, _mac(body)):
        raise bad
    position, digest = json.loads(body)  # signed by this process: our own JSON
    if digest != _digest(binding):
        raise ApiError("INVALID_ARGUMENT", mismatch or (
            f"{field} was issued for other arguments: keep filter, readMask, orderBy and the parent the "
            "same while paging (pageSize may change)."))
    return position


def short_window(size: int) -> int:
    """How many records of the collection a short page looks at."""
    return max(1, size // 2)


def offset_page(token: str, binding: tuple[Any, ...], size: int, total: int, pages: str = "full") -> tuple[int, int]:
    """``[start, end)`` of the next page of a list paged by offset (``pages``: the scenario's
    ``variants.listPages``); the caller adds a token for ``end`` when ``end < total``."""
    if not token:
        if pages == "short" and total:
            return 0, 0  # a first page with nothing on it, and a token
        start = 0
    else:
        start = min(int(decode_token(token, *binding)), total)  # the collection may have shrunk since
    return start, min(total, start + (short_window(size) if pages == "short" else size))
