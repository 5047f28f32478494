"""The emulator's answers to the Vertex AI methods of :mod:`urls`, as a table: rpc name -> a
handler that reads the request (path arguments, query, body) and calls the backend.

The shape of moto's ``responses.py``: each handler only moves the request's parts to one
backend method (the models of the resources live in ``resources/``); the JSON body and error
helpers here are those every route of the emulator answers with.

May import: emulator; never airflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from fastapi import Request
from fastapi.responses import Response

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.backend import Backend
from airflow_gpu_sched.emulator.limits import parse_json
from airflow_gpu_sched.emulator.paging import parse_page_size
from airflow_gpu_sched.emulator.strict_json import refusal


def json_response(body: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), status_code=status,
                    media_type="application/json", headers=headers)


def error_response(exc: ApiError) -> Response:
    headers = {"Retry-After": str(int(exc.retry_after))} if exc.retry_after else None
    return json_response(exc.body(), exc.http_status, headers)


async def read_body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload received: expected an object.")
    return body


async def strict_body(request: Request, rpc: str) -> dict:
    """The body, refused as Google's JSON front end refuses it (unknown names, wrong types)."""
    raw = await request.body()
    body = parse_json(raw) if raw else {}
    error = refusal(rpc, body)
    if error:
        raise error
    return body


@dataclass(frozen=True)
class Call:
    """One Vertex request as the handlers read it."""

    rpc: str
    args: dict[str, str]  # the path's named groups (urls.ROUTES)
    request: Request

    def query(self, name: str) -> Any:
        """A query parameter ("" when absent); ``pageSize`` parsed and bounded."""
        value = self.request.query_params.get(name)
        return parse_page_size(value) if name == "pageSize" else (value or "")

    async def body(self) -> dict:
        return await strict_body(self.request, self.rpc)


Handler = Callable[[Backend, Call], Awaitable[Any]]


def _create(collection: str, *query: str) -> Handler:
    async def handle(backend: Backend, call: Call) -> Any:
        body = await call.body()
        return getattr(backend, collection).create(call.args["project"], call.args["location"], body,
                                                   *(call.query(q) for q in query))
    return handle


def _list(collection: str, parent: tuple[str, str], *query: str) -> Handler:
    async def handle(backend: Backend, call: Call) -> Any:
        return getattr(backend, collection).list(*(call.args[p] for p in parent), *(call.query(q) for q in query))
    return handle


def _by_name(collection: str, method: str) -> Handler:
    async def handle(backend: Backend, call: Call) -> Any:
        return getattr(getattr(backend, collection), method)(call.args["name"])
    return handle


def _cancel(collection: str) -> Handler:
    async def handle(backend: Backend, call: Call) -> Any:
        await call.body()  # Cancel*Request: a body of {} (Google's clients send it)
        return getattr(backend, collection).cancel(call.args["name"])
    return handle


async def _patch_persistent_resource(backend: Backend, call: Call) -> Any:
    body = await call.body()
    return backend.persistent_resources.patch(call.args["name"], body, call.query("updateMask"))


async def _get_quota_info(backend: Backend, call: Call) -> Any:
    return backend.quota_infos.get(call.args["project"], call.args["service"], call.args["quota_id"])


_LOCATION = ("project", "location")
_JOB_LIST = ("filter", "pageSize", "pageToken", "readMask")

RESPONSES: dict[str, Handler] = {
    "customJobs.create": _create("custom_jobs"),
    "customJobs.list": _list("custom_jobs", _LOCATION, *_JOB_LIST),
    "customJobs.get": _by_name("custom_jobs", "get"),
    "customJobs.cancel": _cancel("custom_jobs"),
    "customJobs.delete": _by_name("custom_jobs", "delete"),
    "persistentResources.create": _create("persistent_resources", "persistentResourceId"),
    "persistentResources.list": _list("persistent_resources", _LOCATION, "pageSize", "pageToken"),
    "persistentResources.get": _by_name("persistent_resources", "get"),
    "persistentResources.patch": _patch_persistent_resource,
    "persistentResources.delete": _by_name("persistent_resources", "delete"),
    "operations.get": _by_name("operations", "get"),
    "persistentResources.operations.get": _by_name("operations", "get"),
    "hyperparameterTuningJobs.create": _create("tuning_jobs"),
    "hyperparameterTuningJobs.list": _list("tuning_jobs", _LOCATION, *_JOB_LIST),
    "hyperparameterTuningJobs.get": _by_name("tuning_jobs", "get"),
    "hyperparameterTuningJobs.cancel": _cancel("tuning_jobs"),
    "hyperparameterTuningJobs.delete": _by_name("tuning_jobs", "delete"),
    "trainingPipelines.create": _create("pipelines"),
    "trainingPipelines.list": _list("pipelines", _LOCATION, *_JOB_LIST),
    "trainingPipelines.get": _by_name("pipelines", "get"),
    "trainingPipelines.cancel": _cancel("pipelines"),
    "trainingPipelines.delete": _by_name("pipelines", "delete"),
    "models.list": _list("models", _LOCATION, *_JOB_LIST, "orderBy"),
    "models.get": _by_name("models", "get"),
    "quotaInfos.list": _list("quota_infos", ("project", "service"), "pageSize", "pageToken"),
    "quotaInfos.get": _get_quota_info,
}


async def respond(backend: Backend, rpc: str, args: dict[str, str], request: Request) -> Any:
    """The backend's answer to one Vertex method (a resource as JSON, or an :class:`ApiError`)."""
    return await RESPONSES[rpc](backend, Call(rpc, args, request))
