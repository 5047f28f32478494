"""The errors the Vertex AI clients raise, sync and async alike.

```
VertexError
├── VertexApiError          the service answered with an error status
│   ├── InvalidArgumentError    400: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
│   ├── PermissionDeniedError   401 UNAUTHENTICATED, 403 PERMISSION_DENIED
│   ├── NotFoundError           404 NOT_FOUND
│   ├── AlreadyExistsError      409 ALREADY_EXISTS (and ABORTED)
│   ├── QuotaExceededError      429 RESOURCE_EXHAUSTED
│   └── ServerError             500, 502, 504 and any other 5xx
│       └── UnavailableError        503 UNAVAILABLE
├── VertexTransportError    no answer: connection refused or reset, timeout, broken response
└── AmbiguousCreateError    a create failed in a way that does not prove no job was made
```

Every error carries an :class:`ApiRequestInfo` (rpc, method, url): never headers, never a
token. ``str(error)`` reads
``429 RESOURCE_EXHAUSTED on customJobs.create POST https://...: The following quota ...``.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

TransportKind = Literal["connect", "timeout", "protocol"]


@dataclass(frozen=True)
class ApiRequestInfo:
    """What was asked, for messages and logs. Deliberately holds no headers."""

    method: str
    url: str
    rpc: str

    def __str__(self) -> str:
        return f"{self.rpc} {self.method} {self.url}"


class VertexError(Exception):
    """Base of every error the Vertex AI clients raise."""


class VertexApiError(VertexError):
    """The service answered with an error (HTTP status >= 400).

    ``rpc_status`` is the google.rpc code name (``"RESOURCE_EXHAUSTED"``) when known;
    ``details`` the raw ``error.details`` list; ``retry_after`` the seconds the service asked
    us to wait (``Retry-After`` header or a ``google.rpc.RetryInfo`` detail), if any.
    """

    def __init__(
        self,
        status_code: int,
        rpc_status: str | None,
        message: str,
        request: ApiRequestInfo | None = None,
        details: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ):
        self.status_code = status_code
        self.rpc_status = rpc_status
        self.message = message
        self.request = request
        self.details = list(details or [])
        self.retry_after = retry_after
        super().__init__(str(self))

    @property
    def field_violations(self) -> list[tuple[str, str]]:
        """(field, description) pairs from ``google.rpc.BadRequest`` details."""
        found = []
        for detail in self.details:
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.BadRequest"):
                for violation in detail.get("fieldViolations") or []:
                    found.append((str(violation.get("field", "")), str(violation.get("description", ""))))
        return found

    def __str__(self) -> str:
        label = self.rpc_status or _phrase(self.status_code)
        where = f" on {self.request}" if self.request else ""
        return f"{self.status_code} {label}{where}: {self.message}"

    def __repr__(self) -> str:
        rpc = self.request.rpc if self.request else None
        return (f"{type(self).__name__}(status_code={self.status_code}, rpc_status={self.rpc_status!r}, "
                f"rpc={rpc!r}, message={self.message!r})")

    def __reduce__(self):  # keep pickling working despite the keyword-rich __init__
        return (type(self), (self.status_code, self.rpc_status, self.message, self.request,
                             self.details, self.retry_after))


class InvalidArgumentError(VertexApiError):
    """400: the request is wrong (bad spec, failed precondition, out of range)."""


class PermissionDeniedError(VertexApiError):
    """401 or 403: missing or insufficient credentials."""


class NotFoundError(VertexApiError):
    """404: no such job, resource or operation."""


class AlreadyExistsError(VertexApiError):
    """409: the id is taken (persistent resources), or a concurrent change aborted the call."""


class QuotaExceededError(VertexApiError):
    """429 RESOURCE_EXHAUSTED: request-rate or resource quota; nothing was created."""

    @property
    def is_resource_quota(self) -> bool:
        """A resource quota (GPUs in a region), not a request rate: retrying soon cannot help.

        Vertex words it "The following quota metrics exceed quota limits: aiplatform.googleapis.com/
        custom_model_training_nvidia_l4_gpus"; rate limits read "Quota exceeded for quota metric
        '... requests' ... per minute"."""
        return "exceed quota limits" in (self.message or "")


class ServerError(VertexApiError):
    """5xx: the service failed; the request may or may not have taken effect."""


class UnavailableError(ServerError):
    """503 UNAVAILABLE: the service is overloaded or restarting."""


class VertexTransportError(VertexError):
    """No usable HTTP answer. ``kind``: ``"connect"`` (the request never left: refused,
    unresolvable, connect timeout), ``"timeout"`` (sent, no answer in time) or ``"protocol"``
    (reset mid-way, malformed response)."""

    def __init__(self, kind: TransportKind, request: ApiRequestInfo | None, message: str):
        self.kind = kind
        self.request = request
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" on {self.request}" if self.request else ""
        return f"{self.kind} error{where}: {self.message}"

    def __repr__(self) -> str:
        rpc = self.request.rpc if self.request else None
        return f"VertexTransportError(kind={self.kind!r}, rpc={rpc!r}, message={self.message!r})"

    def __reduce__(self):
        return (type(self), (self.kind, self.request, self.message))


class AmbiguousCreateError(VertexError):
    """A create failed after the request may have reached the service (5xx, read timeout,
    reset). A job may exist: look it up by a label you set before creating it again."""

    def __init__(self, cause: VertexError, request: ApiRequestInfo | None = None):
        self.cause = cause
        self.request = request if request is not None else getattr(cause, "request", None)
        super().__init__(str(self))

    def __str__(self) -> str:
        rpc = self.request.rpc if self.request else "create"
        return (f"outcome of {rpc} unknown after {self.cause}. A job may have been created; "
                "look it up by its labels before creating it again")

    def __repr__(self) -> str:
        return f"AmbiguousCreateError(cause={self.cause!r})"

    def __reduce__(self):
        return (type(self), (self.cause, self.request))


def _phrase(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase.upper().replace(" ", "_")
    except ValueError:
        return "HTTP_ERROR"
