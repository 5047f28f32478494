"""The async client: httpx.AsyncClient, for triggers. Nothing here blocks the event loop:
token refreshes run in a thread, waits use ``asyncio.sleep``.

Every AsyncVertexClient in one event loop shares one ``httpx.AsyncClient`` (one connection
pool): a triggerer runs hundreds of triggers in one loop, and a pool each would open
hundreds of TLS connections to the same host.

May import: vertex; never airflow.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import httpx

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
from airflow_gpu_sched.vertex.client.errors import ApiRequestInfo, VertexApiError, VertexTransportError
from airflow_gpu_sched.vertex.job_type_models import HyperparameterTuningJob, Model, QuotaInfo, TrainingPipeline
from airflow_gpu_sched.vertex.models import AIPLATFORM_SERVICE, CustomJob, Operation, PersistentResource
from airflow_gpu_sched.vertex import service_clock

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

T = TypeVar("T")

_BASE_HEADERS = {"Accept": "application/json", "User-Agent": "airflow-gpu-sched"}
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def shared_http_client() -> httpx.AsyncClient:
    """This event loop's httpx client, created on first use."""
    loop = asyncio.get_running_loop()
    client = _SHARED.get(loop)
    if client is None or client.is_closed:
        client = _SHARED[loop] = httpx.AsyncClient(follow_redirects=False)
    return client


async def aclose_shared_clients() -> None:
    """Close this event loop's shared httpx client (the next request opens a new one)."""
    client = _SHARED.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


class AsyncVertexClient(ClientMethods):
    """Vertex AI custom jobs and persistent resources, async: ``await client.get_custom_job(name)``.

    Same constructor as :class:`~airflow_gpu_sched.vertex.client.sync.VertexClient`, with
    ``http_client`` (e.g. an ``httpx.AsyncClient`` over an ASGI app in tests) in place of
    ``session``; without one, the loop's shared client is used.
    """

    def __init__(self, location: str, project: str | None = None, api_endpoint: str | None = None,
                 credentials: Credentials | None = None, retry: RetryPolicy = RetryPolicy(),
                 timeout: float = 30.0, http_client: httpx.AsyncClient | None = None, *,
                 settings: ConnectionSettings | None = None):
        settings = (settings or ConnectionSettings()).with_overrides(project, api_endpoint)
        self.location = location
        self.project = settings.project_id
        self.api = VertexApi(settings.api_endpoint)
        self.retry = retry
        self.timeout = timeout
        self._tokens = token_source_for(credentials, settings)
        self._http_client = http_client
        self._rng = random.Random()

    @classmethod
    def from_connection(cls, conn_id: str = "google_cloud_default", *, location: str,
                        impersonation_chain: str | Sequence[str] | None = None,
                        **kwargs: Any) -> AsyncVertexClient:
        """Blocking connection lookup: call outside the event loop (or use :meth:`afrom_connection`)."""
        return cls(location, settings=ConnectionSettings.from_airflow(conn_id).with_overrides(
            impersonation_chain=impersonation_chain), **kwargs)

    @classmethod
    async def afrom_connection(cls, conn_id: str = "google_cloud_default", *, location: str,
                               impersonation_chain: str | Sequence[str] | None = None,
                               **kwargs: Any) -> AsyncVertexClient:
        return cls(location, settings=(await ConnectionSettings.afrom_airflow(conn_id)).with_overrides(
            impersonation_chain=impersonation_chain), **kwargs)

    def __repr__(self) -> str:
        return f"AsyncVertexClient(project={self.project!r}, location={self.location!r})"

    # --- the one send loop

    async def _execute(self, call: ApiCall, parse: Callable[[Any], T]) -> T:
        info = self.api.request_info(call)
        state = RetryState(call, self.retry, self._rng)
        while True:
            try:
                return parse(await self._send(call, info))
            except (VertexApiError, VertexTransportError) as error:
                step = state.after(error)
                if isinstance(step, GiveUp):
                    if step.error is error:
                        raise
                    raise step.error from error
                await asyncio.sleep(step.delay)

    async def _send(self, call: ApiCall, info: ApiRequestInfo) -> Any:
        headers = {**_BASE_HEADERS, **await self._tokens.aheaders()}
        client = self._http_client or shared_http_client()
        try:
            response = await client.request(call.method, info.url, json=call.body, headers=headers,
                                            timeout=self.timeout)
        except httpx.TransportError as exc:
            raise transport_error(exc, info) from exc
        service_clock.heard(response.headers.get("Date"))  # errors too: the service's time (service_clock.py)
        if response.status_code >= 300:
            raise error_from_response(response.status_code, response.content, info,
                                      response.headers.get("Retry-After"))
        return parse_success_body(response.content, info)

    # --- paging (the one loop of this face) and waiting

    async def _pages(self, page: Callable[..., Any], items: str, **arguments: Any) -> AsyncIterator[Any]:
        """The ``items`` of every page ``await page(page_token=..., **arguments)`` returns, until
        a page has no token: a page may be short or empty and still carry one (AIP-158)."""
        token = None
        while True:
            found = await page(page_token=token, **arguments)
            for item in getattr(found, items):
                yield item
            if not (token := found.next_page_token):
                return

    def list_custom_jobs(self, filter: str | None = None, page_size: int | None = None,
                         project: str | None = None, location: str | None = None,
                         read_mask: str | None = None) -> AsyncIterator[CustomJob]:
        return self._pages(self.list_custom_jobs_page, "custom_jobs", filter=filter, page_size=page_size,
                           read_mask=read_mask, project=project, location=location)

    def list_persistent_resources(self, page_size: int | None = None, project: str | None = None,
                                  location: str | None = None) -> AsyncIterator[PersistentResource]:
        return self._pages(self.list_persistent_resources_page, "persistent_resources", page_size=page_size,
                           project=project, location=location)

    def list_hyperparameter_tuning_jobs(self, filter: str | None = None, page_size: int | None = None,
                                        project: str | None = None, location: str | None = None,
                                        read_mask: str | None = None) -> AsyncIterator[HyperparameterTuningJob]:
        return self._pages(self.list_hyperparameter_tuning_jobs_page, "hyperparameter_tuning_jobs", filter=filter,
                           page_size=page_size, read_mask=read_mask, project=project, location=location)

    def list_training_pipelines(self, filter: str | None = None, page_size: int | None = None,
                                project: str | None = None, location: str | None = None,
                                read_mask: str | None = None) -> AsyncIterator[TrainingPipeline]:
        return self._pages(self.list_training_pipelines_page, "training_pipelines", filter=filter,
                           page_size=page_size, read_mask=read_mask, project=project, location=location)

    def list_models(self, filter: str | None = None, page_size: int | None = None,
                    project: str | None = None, location: str | None = None,
                    read_mask: str | None = None) -> AsyncIterator[Model]:
        return self._pages(self.list_models_page, "models", filter=filter, page_size=page_size,
                           read_mask=read_mask, project=project, location=location)

    async def list_quota_infos(self, project: str | None = None,
                               service: str = AIPLATFORM_SERVICE) -> list[QuotaInfo]:
        """Every QuotaInfo of ``service`` (all pages). Raises :class:`PermissionDeniedError` on 403."""
        return [info async for info in self._pages(self.list_quota_infos_page, "quota_infos", project=project,
                                                   service=service)]

    async def wait_operation(self, name: str | Operation, timeout: float = 600, poll: float = 1.0) -> Operation:
        """Poll until done. Raises the operation's error as a :class:`VertexApiError`
        subclass, or :class:`TimeoutError` after ``timeout`` seconds."""
        name = name.name if isinstance(name, Operation) else name
        deadline = time.monotonic() + timeout
        while True:
            operation = await self.get_operation(name)
            if operation.done:
                if operation.error is not None and operation.error.code:
                    raise error_from_status(operation.error, self.api.request_info(self.api.get_operation(name)))
                return operation
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"operation {name} not done after {timeout}s")
            await asyncio.sleep(min(poll, remaining))


def transport_error(exc: httpx.TransportError, info: ApiRequestInfo) -> VertexTransportError:
    """``connect`` only when the request never left (refused, connect timeout)."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        kind = "connect"
    elif isinstance(exc, httpx.TimeoutException):
        kind = "timeout"
    else:
        kind = "protocol"
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return VertexTransportError(kind, info, text[:300])
