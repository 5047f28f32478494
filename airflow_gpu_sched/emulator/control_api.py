"""The control API of the emulator (``/emulator/v1/...``), for tests and demos, as a table:
(HTTP method, path, handler). Not Vertex: these routes neither count in the stats nor take
injected faults. Each handler reads the app's state (``backend``, ``auth``, ``traffic``) and
answers a JSON object; an :class:`ApiError` or a ``ValueError`` (a pydantic ValidationError)
answers in Google's error shape.

May import: drawing, emulator; never airflow.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.limits import MAX_ADVANCE_SECONDS, bounded_seconds
from airflow_gpu_sched.emulator.responses import error_response, json_response, read_body
from airflow_gpu_sched.emulator.scenario import CapacitySetting, Faults, QuotaSetting, QuotasSetting, Scenario

# Scenario fields that run commands or touch the filesystem: the CLI or the constructor sets them
# (EmulatorServer(scenario)), never a request (docs/security.md).
EXECUTION_FIELDS = ("execute", "executeRoot", "executeWorkdir", "execute_root", "execute_workdir")


def _refuse_execution(body: dict) -> None:
    named = [name for name in EXECUTION_FIELDS if name in body]
    if named:
        listed = ", ".join(repr(name) for name in named)
        raise ApiError("INVALID_ARGUMENT", f"reset: {listed} cannot be set over HTTP: it runs commands or writes "
                                           "files as the emulator's user. Start the emulator with --execute "
                                           "(--execute-root, --workdir) instead.",
                       [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [
                           {"field": name, "description": "set only on the command line"} for name in named]}])


async def reset(state: Any, request: Request) -> dict:
    body = await read_body(request)
    _refuse_execution(body)
    scenario = Scenario.model_validate(body) if body else Scenario()
    state.backend.reset(scenario.model_copy(update=state.backend.execution))  # the server's own, kept
    state.auth.configure({})  # a reset emulator accepts requests without a token again
    state.traffic.clear()
    return {}


async def capacity(state: Any, request: Request) -> dict:
    setting = CapacitySetting.model_validate(await read_body(request))
    state.backend.apply_capacity(setting.model_dump(exclude_unset=True), at_seconds=setting.at_seconds)
    return {"capacity": state.backend.capacity.snapshot()}


async def quota(state: Any, request: Request) -> dict:
    setting = QuotaSetting.model_validate(await read_body(request))
    state.backend.set_quota(setting.model_dump())
    return {"quota": state.backend.quotas.legacy_view()}


async def quotas(state: Any, request: Request) -> dict:
    setting = QuotasSetting.model_validate(await read_body(request))
    backend = state.backend
    if setting.limit is not None or setting.metric is not None:
        if setting.metric is None or setting.limit is None:
            raise ApiError("INVALID_ARGUMENT", "quotas: set both metric and limit (region optional)")
        backend.set_quota_limit(setting.metric, setting.region, setting.limit)
    if setting.deny is not None:
        backend.quotas.deny = setting.deny
    return {"quotas": backend.quotas.view(), "deny": backend.quotas.deny}


async def quotas_view(state: Any, request: Request) -> dict:
    return {"quotas": state.backend.quotas.view(), "deny": state.backend.quotas.deny}


async def faults(state: Any, request: Request) -> dict:
    state.backend.faults = Faults.model_validate(await read_body(request))
    return state.backend.faults.model_dump(by_alias=True)


async def auth_settings(state: Any, request: Request) -> dict:
    return state.auth.configure(await read_body(request))


async def auth_records(state: Any, request: Request) -> dict:
    return state.auth.records()


async def traffic_start(state: Any, request: Request) -> dict:
    return state.traffic.start()


async def traffic_stop(state: Any, request: Request) -> dict:
    return state.traffic.stop()


async def traffic_view(state: Any, request: Request) -> dict:
    return state.traffic.view()


async def stats(state: Any, request: Request) -> dict:
    return state.backend.stats_view()


async def clock(state: Any, request: Request) -> dict:
    return {"now": state.backend.clock.now().isoformat(), "speed": state.backend.clock.speed}


async def advance_clock(state: Any, request: Request) -> dict:
    body = await read_body(request)
    state.backend.clock.advance(bounded_seconds(body.get("seconds", 0), "seconds", MAX_ADVANCE_SECONDS))
    state.backend.advance()
    return await clock(state, request)


ControlHandler = Callable[[Any, Request], Awaitable[Any]]

CONTROL_ROUTES: list[tuple[str, str, ControlHandler]] = [
    ("POST", "reset", reset),
    ("POST", "capacity", capacity),
    ("POST", "quota", quota),
    ("POST", "quotas", quotas),
    ("GET", "quotas", quotas_view),
    ("POST", "faults", faults),
    ("POST", "auth", auth_settings),
    ("GET", "auth", auth_records),
    ("POST", "traffic:start", traffic_start),
    ("POST", "traffic:stop", traffic_stop),
    ("GET", "traffic", traffic_view),
    ("GET", "stats", stats),
    ("GET", "clock", clock),
    ("POST", "clock:advance", advance_clock),
]


def _endpoint(handler: ControlHandler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state = request.app.state
        try:
            state.backend.advance()
            return json_response(await handler(state, request))
        except ApiError as exc:
            return error_response(exc)
        except ValueError as exc:  # pydantic ValidationError is a ValueError
            return error_response(ApiError("INVALID_ARGUMENT", str(exc)))
    endpoint.__name__ = handler.__name__
    return endpoint


async def dashboard(request: Request) -> Response:
    from airflow_gpu_sched.emulator.dashboard import render

    request.app.state.backend.advance()
    return Response(render(request.app.state.backend), media_type="text/html")


async def timeline_svg(request: Request) -> Response:
    from airflow_gpu_sched.drawing.timeline_svg import svg
    from airflow_gpu_sched.emulator.nights import nights

    backend = request.app.state.backend
    backend.advance()
    return Response(svg(nights(backend), "Vertex AI emulator: jobs"), media_type="image/svg+xml")


async def by_name(request: Request) -> Response:
    # POST /emulator/v1/{name}:preempt | :setState ; GET /emulator/v1/{name}:history
    backend = request.app.state.backend
    path = request.path_params["name"]
    name, _, verb = path.rpartition(":")
    try:
        backend.advance()
        if request.method == "POST" and verb == "preempt":
            return json_response(backend.preempt(name))
        if request.method == "POST" and verb == "setState":
            body = await read_body(request)
            return json_response(backend.set_resource_state(name, body.get("state", ""), body.get("message")))
        if request.method == "GET" and verb == "history":
            return json_response(backend.job_history(name))
        raise ApiError("NOT_FOUND", f"{request.method} /emulator/v1/{path} is not a control method.")
    except ApiError as exc:
        return error_response(exc)


def add_control_routes(app: FastAPI) -> None:
    """The table's routes, then the dashboard, the timeline and the per-resource verbs."""
    for method, path, handler in CONTROL_ROUTES:
        app.add_api_route(f"/emulator/v1/{path}", _endpoint(handler), methods=[method], include_in_schema=False)
    app.add_api_route("/", dashboard, methods=["GET"], include_in_schema=False)
    app.add_api_route("/emulator/v1/timeline.svg", timeline_svg, methods=["GET"], include_in_schema=False)
    app.add_api_route("/emulator/v1/{name:path}", by_name, methods=["GET", "POST"], include_in_schema=False)
