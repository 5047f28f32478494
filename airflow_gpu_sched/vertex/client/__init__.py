"""Clients for the Vertex AI v1 REST surface this project uses (or the emulator's).

``VertexClient`` blocks (operators, hooks); ``AsyncVertexClient`` is for triggers. Both
share one core (:mod:`.core`: URLs, bodies, error mapping, the retry classifier) and raise
the errors of :mod:`.errors`.

May import: vertex; never airflow.
"""

from airflow_gpu_sched.vertex.client.aio import AsyncVertexClient, aclose_shared_clients
from airflow_gpu_sched.vertex.client.auth import ConnectionSettings, TokenSource
from airflow_gpu_sched.vertex.client.calls import ApiCall, Safety
from airflow_gpu_sched.vertex.client.core import VertexApi
from airflow_gpu_sched.vertex.client.endpoints import CLOUD_QUOTAS_ROOT, DEFAULT_API_ROOT, is_loopback_http, quotas_root
from airflow_gpu_sched.vertex.client.responses import (
    GiveUp,
    Retry,
    RetryPolicy,
    error_from_response,
    error_from_status,
    next_step,
)
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
from airflow_gpu_sched.vertex.client.sync import VertexClient

__all__ = [
    "CLOUD_QUOTAS_ROOT",
    "DEFAULT_API_ROOT",
    "AlreadyExistsError",
    "AmbiguousCreateError",
    "ApiCall",
    "ApiRequestInfo",
    "AsyncVertexClient",
    "ConnectionSettings",
    "GiveUp",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "Retry",
    "RetryPolicy",
    "Safety",
    "ServerError",
    "TokenSource",
    "UnavailableError",
    "VertexApi",
    "VertexApiError",
    "VertexClient",
    "VertexError",
    "VertexTransportError",
    "aclose_shared_clients",
    "error_from_response",
    "error_from_status",
    "is_loopback_http",
    "next_step",
    "quotas_root",
]
