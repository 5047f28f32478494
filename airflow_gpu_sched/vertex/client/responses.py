"""What an answer means: the error a failed response or an operation's status is, the one
retry classifier (retry or give up, and after how long), and a success body.

May import: vertex; never airflow.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping, Protocol

from airflow_gpu_sched.vertex.client.calls import ApiCall, Safety
from airflow_gpu_sched.vertex.client.errors import (
    AlreadyExistsError,
    AmbiguousCreateError,
    ApiRequestInfo,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    ServerError,
    UnavailableError,
    VertexApiError,
    VertexError,
    VertexTransportError,
)
from airflow_gpu_sched.vertex.models import Status
from airflow_gpu_sched.vertex.wire_scalars import parse_duration

log = logging.getLogger("airflow_gpu_sched.client")  # the name users' logging configs know


# --------------------------------------------------------------------------- errors

# google.rpc.Code: number -> (name, HTTP status), from vertex-api.md.
RPC_CODES: dict[int, tuple[str, int]] = {
    1: ("CANCELLED", 499), 2: ("UNKNOWN", 500), 3: ("INVALID_ARGUMENT", 400),
    4: ("DEADLINE_EXCEEDED", 504), 5: ("NOT_FOUND", 404), 6: ("ALREADY_EXISTS", 409),
    7: ("PERMISSION_DENIED", 403), 8: ("RESOURCE_EXHAUSTED", 429), 9: ("FAILED_PRECONDITION", 400),
    10: ("ABORTED", 409), 11: ("OUT_OF_RANGE", 400), 12: ("UNIMPLEMENTED", 501), 13: ("INTERNAL", 500),
    14: ("UNAVAILABLE", 503), 15: ("DATA_LOSS", 500), 16: ("UNAUTHENTICATED", 401),
}


def error_class(status_code: int) -> type[VertexApiError]:
    if status_code == 400:
        return InvalidArgumentError
    if status_code in (401, 403):
        return PermissionDeniedError
    if status_code == 404:
        return NotFoundError
    if status_code == 409:
        return AlreadyExistsError
    if status_code == 429:
        return QuotaExceededError
    if status_code == 503:
        return UnavailableError
    if status_code >= 500:
        return ServerError
    return VertexApiError


def error_from_response(status_code: int, body: bytes | str | Mapping[str, Any] | list | None,
                        request: ApiRequestInfo | None = None,
                        retry_after_header: str | None = None) -> VertexApiError:
    """Map an error response (Google's ``{"error": {code, message, status, details}}`` or
    anything else a proxy may send) to the matching :class:`VertexApiError` subclass."""
    data = _json_or_none(body)
    if isinstance(data, list) and data:  # some Google front ends wrap the error in a list
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        rpc_status = error.get("status") or None
        details = [d for d in error.get("details") or [] if isinstance(d, dict)]
    else:
        message, rpc_status, details = _text_of(body), None, []
    retry_after = parse_retry_after(retry_after_header)
    if retry_after is None:
        retry_after = _retry_info_delay(details)
    return error_class(status_code)(status_code, rpc_status, message or "(no message)", request, details,
                                    retry_after)


def error_from_status(status: Status, request: ApiRequestInfo | None = None) -> VertexApiError:
    """An rpc Status (an Operation's or a job's ``error``) as the matching error class."""
    name, http_status = RPC_CODES.get(status.code or 0, ("UNKNOWN", 500))
    return error_class(http_status)(http_status, name, status.message or "(no message)", request,
                                    status.details or [])


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After``: delay-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _retry_info_delay(details: list[dict[str, Any]]) -> float | None:
    for detail in details:
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo") and detail.get("retryDelay"):
            try:
                return max(0.0, parse_duration(detail["retryDelay"]).total_seconds())
            except ValueError:
                return None
    return None


def _json_or_none(body: Any) -> Any:
    if body is None or isinstance(body, (dict, list)):
        return body
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def _text_of(body: Any, limit: int = 300) -> str:
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body).decode("utf-8", errors="replace")
    elif isinstance(body, (dict, list)):
        body = json.dumps(body)
    text = " ".join(str(body or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, within a total time budget (seconds)."""

    initial: float = 1.0
    maximum: float = 30.0
    multiplier: float = 2.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if min(self.initial, self.maximum, self.deadline) < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy needs initial, maximum, deadline >= 0 and multiplier >= 1")

    def cap(self, attempt: int) -> float:
        """Largest delay after failed attempt number ``attempt`` (0 = the first failure)."""
        try:
            return min(self.maximum, self.initial * self.multiplier ** max(0, attempt))
        except OverflowError:
            return self.maximum

    def backoff(self, attempt: int, rng: _Rng) -> float:
        return rng.uniform(0, self.cap(attempt))


class _Rng(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


@dataclass(frozen=True)
class Retry:
    delay: float


@dataclass(frozen=True)
class GiveUp:
    error: VertexError  # what the face raises: the last error, or an AmbiguousCreateError


RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def next_step(call: ApiCall, error: VertexError, attempt: int, elapsed: float,
              policy: RetryPolicy, rng: _Rng) -> Retry | GiveUp:
    """The one retry classifier. ``attempt`` counts failures before this one (0 first);
    ``elapsed`` is seconds since the first send."""
    if isinstance(error, QuotaExceededError) and error.is_resource_quota:
        return GiveUp(error)  # GPUs over the region's quota: no retry frees them; the caller decides
    if call.safety is Safety.CREATE:
        # Retry a create only when the failure proves no job was made: a quota rejection,
        # or a connection that never opened. Anything else may have created the job.
        safe = (isinstance(error, QuotaExceededError)
                or (isinstance(error, VertexTransportError) and error.kind == "connect"))
        if not safe:
            if isinstance(error, (ServerError, VertexTransportError)):
                return GiveUp(AmbiguousCreateError(error))
            return GiveUp(error)
    elif not (isinstance(error, VertexTransportError)
              or (isinstance(error, VertexApiError) and error.status_code in RETRYABLE_STATUS)):
        return GiveUp(error)
    remaining = policy.deadline - elapsed
    if remaining <= 0:
        return GiveUp(error)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None and retry_after > remaining:
        return GiveUp(error)  # the server asked for more time than the budget has left
    # The last try lands on the deadline, not before it: callers rely on "not before the window".
    delay = min(policy.backoff(attempt, rng), remaining)
    return Retry(max(delay, retry_after or 0.0))


class RetryState:
    """Counts attempts and time for one logical call; both faces loop on :meth:`after`."""

    def __init__(self, call: ApiCall, policy: RetryPolicy, rng: _Rng,
                 clock: Callable[[], float] = time.monotonic):
        self.call, self.policy, self.rng, self.clock = call, policy, rng, clock
        self.attempt = 0
        self.started = clock()

    def after(self, error: VertexError) -> Retry | GiveUp:
        step = next_step(self.call, error, self.attempt, self.clock() - self.started, self.policy, self.rng)
        if isinstance(step, Retry):
            self.attempt += 1
            log.info("retrying %s after %s (attempt %d) in %.2fs",
                     self.call.rpc, _short(error), self.attempt, step.delay)
        return step


def _short(error: VertexError) -> str:
    if isinstance(error, VertexApiError):
        return f"{error.status_code} {error.rpc_status or ''}".strip()
    if isinstance(error, VertexTransportError):
        return f"{error.kind} error"
    return type(error).__name__


def parse_success_body(content: bytes, request: ApiRequestInfo) -> Any:
    """A 2xx body as JSON. A broken body is a protocol error: it goes through the classifier
    like a reset would (a create that got a 200 with garbage probably made the job)."""
    if not content.strip():
        return {}
    try:
        return json.loads(content)
    except ValueError:
        raise VertexTransportError(
            "protocol", request, f"2xx response is not JSON: {_text_of(content, 120)}") from None
