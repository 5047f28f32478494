"""The blocking client: requests + google-auth. For operators and hooks, never in a trigger.

May import: vertex; never airflow.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import requests
from urllib3.exceptions import NewConnectionError

from airflow_gpu_sched.vertex.client.auth import ConnectionSettings, token_source_for
from airflow_gpu_sched.vertex.client.calls import ApiCall
from airflow_gpu_sched.vertex.client.core import ClientMethods, VertexApi
from airflow_gpu_sched.vertex.client.responses import (
    GiveUp,
    RetryPolicy,
    RetryState,
    error_from_response,
    error_from_status,
    parse_success_body,
)
from airflow_gpu_sched.vertex.client.errors import ApiRequestInfo, VertexApiError, VertexError, VertexTransportError
from airflow_gpu_sched.vertex.job_type_models import HyperparameterTuningJob, Model, QuotaInfo, TrainingPipeline
from airflow_gpu_sched.vertex.models import AIPLATFORM_SERVICE, CustomJob, Operation, PersistentResource
from airflow_gpu_sched.vertex import service_clock

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

T = TypeVar("T")

_BASE_HEADERS = {"Accept": "application/json", "User-Agent": "airflow-gpu-sched"}
# Failures that say something about the network; anything else (a bad URL...) is a bug, not retried.
_TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                     requests.exceptions.ContentDecodingError)


class VertexClient(ClientMethods):
    """Vertex AI custom jobs, tuning jobs, training pipelines, models, persistent resources
    (and Cloud Quotas reads), blocking.

    ``credentials=None`` means: none for an ``http://127.0.0.1`` emulator, else found from
    ``settings`` (a connection) or the environment on the first request.
    """

    def __init__(self, location: str, project: str | None = None, api_endpoint: str | None = None,
                 credentials: Credentials | None = None, retry: RetryPolicy = RetryPolicy(),
                 timeout: float = 30.0, session: requests.Session | None = None, *,
                 settings: ConnectionSettings | None = None):
        settings = (settings or ConnectionSettings()).with_overrides(project, api_endpoint)
        self.location = location
        self.project = settings.project_id
        self.api = VertexApi(settings.api_endpoint)
        self.retry = retry
        self.timeout = timeout
        self._tokens = token_source_for(credentials, settings)
        self._session = session or requests.Session()
        self._owns_session = session is None
        self._rng = random.Random()

    @classmethod
    def from_connection(cls, conn_id: str = "google_cloud_default", *, location: str,
                        impersonation_chain: str | Sequence[str] | None = None, **kwargs: Any) -> VertexClient:
        """A client configured by an Airflow ``google_cloud_platform`` connection."""
        return cls(location, settings=ConnectionSettings.from_airflow(conn_id).with_overrides(
            impersonation_chain=impersonation_chain), **kwargs)

    def __repr__(self) -> str:
        return f"VertexClient(project={self.project!r}, location={self.location!r})"

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def __enter__(self) -> VertexClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the one send loop

    def _execute(self, call: ApiCall, parse: Callable[[Any], T]) -> T:
        info = self.api.request_info(call)
        state = RetryState(call, self.retry, self._rng)
        while True:
            try:
                return parse(self._send(call, info))
            except (VertexApiError, VertexTransportError) as error:
                step = state.after(error)
                if isinstance(step, GiveUp):
                    if step.error is error:
                        raise
                    raise step.error from error
                time.sleep(step.delay)

    def _send(self, call: ApiCall, info: ApiRequestInfo) -> Any:
        headers = {**_BASE_HEADERS, **self._tokens.headers()}
        try:
            response = self._session.request(call.method, info.url, json=call.body, headers=headers,
                                             timeout=self.timeout, allow_redirects=False)
        except _TRANSPORT_ERRORS as exc:
            raise transport_error(exc, info) from exc
        service_clock.heard(response.headers.get("Date"))  # errors too: the service's time (service_clock.py)
        if response.status_code >= 300:
            raise error_from_response(response.status_code, response.content, info,
                                      response.headers.get("Retry-After"))
        return parse_success_body(response.content, info)

    # --- paging (the one loop of this face) and waiting

    def _pages(self, page: Callable[..., Any], items: str, max_pages: int | None = None, what: str = "",
               **arguments: Any) -> Iterator[Any]:
        """The ``items`` of every page ``page(page_token=..., **arguments)`` returns, until a page
        has no token: a page may be short or empty and still carry one (AIP-158). Lazy: the
        first request goes out at the first item."""
        token = None
        for _ in range(max_pages) if max_pages else itertools.count():
            found = page(page_token=token, **arguments)
            yield from getattr(found, items)
            if not (token := found.next_page_token):
                return
        raise VertexError(f"{what} did not end within {max_pages} pages")

    def list_custom_jobs(self, filter: str | None = None, page_size: int | None = None,
                         project: str | None = None, location: str | None = None,
                         read_mask: str | None = None) -> Iterator[CustomJob]:
        return self._pages(self.list_custom_jobs_page, "custom_jobs", filter=filter, page_size=page_size,
                           read_mask=read_mask, project=project, location=location)

    def list_persistent_resources(self, page_size: int | None = None, project: str | None = None,
                                  location: str | None = None) -> Iterator[PersistentResource]:
        return self._pages(self.list_persistent_resources_page, "persistent_resources", page_size=page_size,
                           project=project, location=location)

    def list_hyperparameter_tuning_jobs(self, filter: str | None = None, page_size: int | None = None,
                                        project: str | None = None, location: str | None = None,
                                        read_mask: str | None = None) -> Iterator[HyperparameterTuningJob]:
        """Every tuning job matching ``filter``, newest first (lists carry no ``trials``)."""
        return self._pages(self.list_hyperparameter_tuning_jobs_page, "hyperparameter_tuning_jobs", filter=filter,
                           page_size=page_size, read_mask=read_mask, project=project, location=location)

    def list_training_pipelines(self, filter: str | None = None, page_size: int | None = None,
                                project: str | None = None, location: str | None = None,
                                read_mask: str | None = None) -> Iterator[TrainingPipeline]:
        return self._pages(self.list_training_pipelines_page, "training_pipelines", filter=filter,
                           page_size=page_size, read_mask=read_mask, project=project, location=location)

    def list_models(self, filter: str | None = None, page_size: int | None = None, project: str | None = None,
                    location: str | None = None, read_mask: str | None = None) -> Iterator[Model]:
        return self._pages(self.list_models_page, "models", filter=filter, page_size=page_size,
                           read_mask=read_mask, project=project, location=location)

    def list_quota_infos(self, project: str | None = None, service: str = AIPLATFORM_SERVICE) -> list[QuotaInfo]:
        """Every QuotaInfo of ``service`` (all pages), from the Cloud Quotas API. Raises
        :class:`PermissionDeniedError` when the caller may not read quotas (403)."""
        return list(self._pages(self.list_quota_infos_page, "quota_infos", project=project, service=service))

    def list_skus(self, service: str, currency_code: str | None = None, max_pages: int = 100) -> list[Any]:
        """Every Sku of a billing ``service`` (all pages, at most ``max_pages``: a catalog that
        never ends is refused, not followed forever)."""
        return list(self._pages(self.list_skus_page, "skus", max_pages, f"skus.list of {service}", service=service,
                                currency_code=currency_code))

    def wait_operation(self, name: str | Operation, timeout: float = 600, poll: float = 1.0) -> Operation:
        """Poll until done. Raises the operation's error as a :class:`VertexApiError`
        subclass, or :class:`TimeoutError` after ``timeout`` seconds."""
        name = name.name if isinstance(name, Operation) else name
        deadline = time.monotonic() + timeout
        while True:
            operation = self.get_operation(name)
            if operation.done:
                if operation.error is not None and operation.error.code:
                    raise error_from_status(operation.error, self.api.request_info(self.api.get_operation(name)))
                return operation
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"operation {name} not done after {timeout}s")
            time.sleep(min(poll, remaining))


def transport_error(exc: requests.RequestException, info: ApiRequestInfo) -> VertexTransportError:
    """``connect`` only when the request provably never left (refused, unresolvable, connect
    timeout): the retry classifier may then resend even a create."""
    if isinstance(exc, requests.ConnectTimeout) or (isinstance(exc, requests.ConnectionError) and _never_connected(exc)):
        kind = "connect"
    elif isinstance(exc, requests.ReadTimeout):
        kind = "timeout"
    else:
        kind = "protocol"
    return VertexTransportError(kind, info, _describe(exc))


def _never_connected(exc: BaseException) -> bool:
    # requests wraps urllib3's MaxRetryError, whose .reason is the NewConnectionError.
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return False
        if isinstance(seen, (NewConnectionError, ConnectionRefusedError)):
            return True
        reason = getattr(seen, "reason", None)
        if isinstance(reason, BaseException):
            seen = reason
        elif seen.args and isinstance(seen.args[0], BaseException):
            seen = seen.args[0]
        else:
            seen = seen.__cause__ or seen.__context__
    return False


def _describe(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:300] + "..."
