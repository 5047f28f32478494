"""HTTP surface of the emulator: Vertex AI v1 routes plus a control API for tests and demos.

Routes -> :class:`Backend` methods. Google-style paths (``{name}:cancel``) are matched with
regular expressions rather than FastAPI path templates, which cannot split ``:verb``.
Every Vertex route counts in ``/emulator/v1/stats`` and is subject to injected faults;
control routes (``/emulator/v1/...``) are neither. ``traffic.py`` records Vertex exchanges on request.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from urllib.parse import parse_qs
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.auth import StandInError, TokenIssuer
from airflow_gpu_sched.emulator.backend import Backend
from airflow_gpu_sched.emulator.guard import Guard, GuardSettings
from airflow_gpu_sched.emulator.service_date import ServiceDate
from airflow_gpu_sched.emulator.limits import MAX_ADVANCE_SECONDS, bounded_seconds, parse_json
from airflow_gpu_sched.emulator.logging_api import add_logging_routes
from airflow_gpu_sched.emulator.methods import query_refusal
from airflow_gpu_sched.emulator.paging import parse_page_size
from airflow_gpu_sched.emulator.proto_json import canonical
from airflow_gpu_sched.emulator.scenario import CapacitySetting, Faults, QuotaSetting, QuotasSetting, Scenario
from airflow_gpu_sched.emulator.strict_json import refusal
from airflow_gpu_sched.emulator.traffic import TrafficRecorder

_SEG = r"[^/:]+"
_PARENT = rf"projects/(?P<project>{_SEG})/locations/(?P<location>{_SEG})"

# (HTTP method, path regex, rpc name). Order matters only where patterns overlap.
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(rf"^{p}$"), rpc) for m, p, rpc in [
        ("POST", rf"{_PARENT}/customJobs", "customJobs.create"),
        ("GET", rf"{_PARENT}/customJobs", "customJobs.list"),
        ("GET", rf"(?P<name>{_PARENT}/customJobs/{_SEG})", "customJobs.get"),
        ("POST", rf"(?P<name>{_PARENT}/customJobs/{_SEG}):cancel", "customJobs.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/customJobs/{_SEG})", "customJobs.delete"),
        ("POST", rf"{_PARENT}/persistentResources", "persistentResources.create"),
        ("GET", rf"{_PARENT}/persistentResources", "persistentResources.list"),
        ("GET", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.get"),
        ("DELETE", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.delete"),
        ("PATCH", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.patch"),
        ("GET", rf"(?P<name>{_PARENT}/operations/{_SEG})", "operations.get"),
        ("GET", rf"(?P<name>{_PARENT}/persistentResources/{_SEG}/operations/{_SEG})",
         "persistentResources.operations.get"),
        ("POST", rf"{_PARENT}/hyperparameterTuningJobs", "hyperparameterTuningJobs.create"),
        ("GET", rf"{_PARENT}/hyperparameterTuningJobs", "hyperparameterTuningJobs.list"),
        ("GET", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG})", "hyperparameterTuningJobs.get"),
        ("POST", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG}):cancel", "hyperparameterTuningJobs.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG})", "hyperparameterTuningJobs.delete"),
        ("POST", rf"{_PARENT}/trainingPipelines", "trainingPipelines.create"),
        ("GET", rf"{_PARENT}/trainingPipelines", "trainingPipelines.list"),
        ("GET", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG})", "trainingPipelines.get"),
        ("POST", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG}):cancel", "trainingPipelines.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG})", "trainingPipelines.delete"),
        ("GET", rf"{_PARENT}/models", "models.list"),
        ("GET", rf"(?P<name>{_PARENT}/models/{_SEG})", "models.get"),
        # Cloud Quotas API v1 (cloudquotas.googleapis.com), served on the same host
        ("GET", rf"projects/(?P<project>{_SEG})/locations/global/services/(?P<service>{_SEG})/quotaInfos",
         "quotaInfos.list"),
        ("GET", rf"projects/(?P<project>{_SEG})/locations/global/services/(?P<service>{_SEG})/quotaInfos/"
                rf"(?P<quota_id>{_SEG})", "quotaInfos.get"),
    ]
]


def match_route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    for route_method, pattern, rpc in ROUTES:
        if route_method == method:
            found = pattern.match(path)
            if found:
                return rpc, found.groupdict()
    return None


def _json(body: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), status_code=status,
                    media_type="application/json", headers=headers)


def _error(exc: ApiError) -> Response:
    headers = {"Retry-After": str(int(exc.retry_after))} if exc.retry_after else None
    return _json(exc.body(), exc.http_status, headers)


async def _body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload received: expected an object.")
    return body


async def _strict_body(request: Request, rpc: str) -> dict:
    """The body, refused as Google's JSON front end refuses it (unknown names, wrong types)."""
    raw = await request.body()
    body = parse_json(raw) if raw else {}
    error = refusal(rpc, body)
    if error:
        raise error
    return body


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


def _page_size(request: Request) -> int | None:
    return parse_page_size(request.query_params.get("pageSize"))


async def _dispatch(backend: Backend, rpc: str, args: dict[str, str], request: Request) -> Any:
    q = request.query_params
    if rpc == "customJobs.create":
        return backend.custom_jobs.create(args["project"], args["location"], await _strict_body(request, rpc))
    if rpc == "customJobs.list":
        return backend.custom_jobs.list(args["project"], args["location"], q.get("filter", ""),
                                        _page_size(request), q.get("pageToken", ""), q.get("readMask", ""))
    if rpc == "customJobs.get":
        return backend.custom_jobs.get(args["name"])
    if rpc == "customJobs.cancel":
        await _strict_body(request, rpc)  # Cancel*Request: a body of {} (Google's clients send it)
        return backend.custom_jobs.cancel(args["name"])
    if rpc == "customJobs.delete":
        return backend.custom_jobs.delete(args["name"])
    if rpc == "persistentResources.create":
        return backend.persistent_resources.create(args["project"], args["location"],
                                                  await _strict_body(request, rpc),
                                                  q.get("persistentResourceId", ""))
    if rpc == "persistentResources.list":
        return backend.persistent_resources.list(args["project"], args["location"], _page_size(request),
                                                 q.get("pageToken", ""))
    if rpc == "persistentResources.get":
        return backend.persistent_resources.get(args["name"])
    if rpc == "persistentResources.patch":
        return backend.persistent_resources.patch(args["name"], await _strict_body(request, rpc),
                                                  q.get("updateMask", ""))
    if rpc == "persistentResources.delete":
        return backend.persistent_resources.delete(args["name"])
    if rpc in ("operations.get", "persistentResources.operations.get"):
        return backend.operations.get(args["name"])
    if rpc == "hyperparameterTuningJobs.create":
        return backend.tuning_jobs.create(args["project"], args["location"],
                                                        await _strict_body(request, rpc))
    if rpc == "hyperparameterTuningJobs.list":
        return backend.tuning_jobs.list(args["project"], args["location"], q.get("filter", ""),
                                                       _page_size(request), q.get("pageToken", ""),
                                                       q.get("readMask", ""))
    if rpc == "hyperparameterTuningJobs.get":
        return backend.tuning_jobs.get(args["name"])
    if rpc == "hyperparameterTuningJobs.cancel":
        await _strict_body(request, rpc)  # Cancel*Request: a body of {} (Google's clients send it)
        return backend.tuning_jobs.cancel(args["name"])
    if rpc == "hyperparameterTuningJobs.delete":
        return backend.tuning_jobs.delete(args["name"])
    if rpc == "trainingPipelines.create":
        return backend.pipelines.create(args["project"], args["location"], await _strict_body(request, rpc))
    if rpc == "trainingPipelines.list":
        return backend.pipelines.list(args["project"], args["location"], q.get("filter", ""),
                                               _page_size(request), q.get("pageToken", ""), q.get("readMask", ""))
    if rpc == "trainingPipelines.get":
        return backend.pipelines.get(args["name"])
    if rpc == "trainingPipelines.cancel":
        await _strict_body(request, rpc)  # Cancel*Request: a body of {} (Google's clients send it)
        return backend.pipelines.cancel(args["name"])
    if rpc == "trainingPipelines.delete":
        return backend.pipelines.delete(args["name"])
    if rpc == "models.list":
        return backend.models.list(args["project"], args["location"], q.get("filter", ""), _page_size(request),
                                   q.get("pageToken", ""), q.get("readMask", ""), q.get("orderBy", ""))
    if rpc == "models.get":
        return backend.models.get(args["name"])
    if rpc == "quotaInfos.list":
        return backend.quota_infos.list(args["project"], args["service"], _page_size(request),
                                        q.get("pageToken", ""))
    if rpc == "quotaInfos.get":
        return backend.quota_infos.get(args["project"], args["service"], args["quota_id"])
    raise AssertionError(rpc)


def _assertion_issuer(assertion: str | None) -> Any:
    """The ``iss`` claim of a JWT-bearer assertion (header.claims.signature, the signature not
    checked), its claims read through the same JSON limits as every body (depth, finite numbers:
    never a RecursionError); None without a three-part assertion or an object of claims."""
    parts = (assertion or "").split(".")
    if len(parts) != 3:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
    except ValueError:
        return None
    claims = parse_json(raw)
    return claims.get("iss") if isinstance(claims, dict) else None


def _add_token_services(app: FastAPI, backend: Backend, auth: TokenIssuer) -> None:
    """IAM Credentials, STS and Secret Manager stand-ins on the emulator's own host (real
    Google serves them on iamcredentials/sts/secretmanager.googleapis.com): see emulator.auth."""

    def count(stat: str) -> None:
        backend.stats[stat] = backend.stats.get(stat, 0) + 1

    async def generate_access_token(request: Request, account: str) -> Response:
        try:
            body = await _body(request)
            answer = auth.generate_access_token(account, body, request.headers.get("authorization"))
        except (ApiError, StandInError) as exc:
            return _error(exc if isinstance(exc, ApiError) else ApiError(exc.status, exc.message))
        count("tokensImpersonated")
        return _json(answer)

    async def exchange_token(request: Request) -> Response:
        # RFC 8693 over a form body (what google-auth's sts client sends); errors in OAuth's shape
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
        try:
            answer = auth.exchange_token(form)
        except StandInError as exc:
            return _json({"error": exc.status, "error_description": exc.message}, 400)
        count("tokensExchanged")
        return _json(answer)

    async def access_secret(request: Request, project: str, secret: str, version: str) -> Response:
        try:
            answer = auth.access_secret(project, secret, version, request.headers.get("authorization"))
        except StandInError as exc:
            return _error(ApiError(exc.status, exc.message))
        count("secretsAccessed")
        return _json(answer)

    app.add_api_route("/v1/projects/-/serviceAccounts/{account}:generateAccessToken", generate_access_token,
                      methods=["POST"], include_in_schema=False)
    app.add_api_route("/v1/token", exchange_token, methods=["POST"], include_in_schema=False)
    app.add_api_route("/v1/projects/{project}/secrets/{secret}/versions/{version}:access", access_secret,
                      methods=["GET"], include_in_schema=False)


def create_app(backend: Backend | None = None, *, allow_remote: bool = False,
               control_token: str | None = None) -> FastAPI:
    """``allow_remote``: answer requests for any Host/Origin (emulator/guard.py);
    ``control_token``: the token ``/emulator/v1/...`` requests must carry."""
    backend = backend or Backend()
    app = FastAPI(title="airflow-gpu-sched Vertex AI emulator", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.backend = backend
    app.state.guard = GuardSettings(allow_remote=allow_remote, control_token=control_token)
    app.add_middleware(Guard, settings=app.state.guard)
    app.add_middleware(ServiceDate, clock=lambda: backend.clock)  # outermost: the Guard's refusals dated too

    @app.exception_handler(StarletteHTTPException)
    async def not_served(request: Request, exc: StarletteHTTPException) -> Response:
        # the router's own 404/405 (a path or method no route serves, an OPTIONS preflight) in
        # Google's error shape, as NOT_FOUND (what Google's front end answers: assumed)
        return _error(ApiError("NOT_FOUND", f"{request.method} {request.url.path[:200]} is not a method the "
                                            "emulator serves."))
    auth = app.state.auth = TokenIssuer()
    traffic = app.state.traffic = TrafficRecorder()
    _add_token_services(app, backend, auth)  # before /v1/{path}: these paths are not Vertex methods
    from airflow_gpu_sched.emulator.billing_api import add_billing_routes

    add_billing_routes(app, backend, traffic, auth)  # Cloud Billing's GET /v1/services/{s}/skus, also before

    async def vertex(request: Request, path: str) -> Response:
        found = match_route(request.method, path)
        if found is None:
            return _error(ApiError("NOT_FOUND", f"{request.method} /v1/{path} is not a method the emulator serves."))
        rpc, args = found
        backend.count(rpc)
        refusal = auth.admit(request.headers.get("authorization"), backend.stats)
        if refusal:
            return _error(ApiError("UNAUTHENTICATED", refusal))
        unknown = query_refusal(rpc, request.query_params.keys())  # a parameter the method lacks: 400
        if unknown:
            return _error(unknown)
        faults = backend.faults
        if faults.latency_seconds:
            await asyncio.sleep(faults.latency_seconds)
        fault = None
        if faults.error_rate and backend.rng.random() < faults.error_rate:
            backend.stats["faultsInjected"] += 1
            status = backend.rng.choice(faults.status_codes)
            name = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                    504: "DEADLINE_EXCEEDED"}.get(status, "INTERNAL")
            fault = _json(ApiError(name, f"Injected fault ({status}) for {rpc}.").body(), status)
            # Only a 5xx can come after the work was done: a 429 means the request was refused.
            if not (status >= 500 and faults.after_handler_rate and backend.rng.random() < faults.after_handler_rate):
                return fault
        backend.advance()
        try:
            # printed as Google's servers print: no default of a field without presence
            response = _json(canonical(rpc, await _dispatch(backend, rpc, args, request)))
        except ApiError as exc:
            response = _error(exc)
        return fault or response  # a fault after the handler: done, but the answer is lost

    app.add_api_route("/v1/{path:path}", traffic.wrap(vertex, match_route), methods=["GET", "POST", "DELETE", "PATCH"],
                      include_in_schema=False)
    app.state.logs = add_logging_routes(app, backend, traffic, auth)  # Cloud Logging's POST /v2/entries:list

    async def ui(request: Request, path: str) -> Response:
        # Google's GAPIC REST clients get operations at /ui/{name=projects/*/locations/*/operations/*}
        # (and .../persistentResources/*/operations/*): google.longrunning.Operations.GetOperation's
        # first http rule in aiplatform_v1's rest_base.py. Only operations are served there.
        found = match_route(request.method, path)
        if found is None or not found[0].endswith("operations.get"):
            return _error(ApiError("NOT_FOUND", f"{request.method} /ui/{path} is not a method the emulator serves."))
        return await vertex(request, path)

    app.add_api_route("/ui/{path:path}", ui, methods=["GET"], include_in_schema=False)

    from airflow_gpu_sched.emulator.reservations import add_compute_routes

    add_compute_routes(app, backend, auth)  # Compute Engine reservations at /compute/v1/...

    async def token(request: Request) -> Response:
        # Google's OAuth token endpoint, as a service-account key's token_uri (the JWT
        # assertion is not checked: the emulator only hands out its one token)
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
        try:
            issuer = _assertion_issuer(form.get("assertion"))
        except ApiError as exc:  # OAuth's error shape, as Google's token endpoint answers a bad JWT
            return _json({"error": "invalid_grant", "error_description": f"Invalid JWT: {exc.message}"}, 400)
        backend.stats["tokensIssued"] = backend.stats.get("tokensIssued", 0) + 1
        auth.record_grant(form.get("grant_type"), issuer)
        return _json(auth.token_response())

    app.add_api_route("/token", token, methods=["POST"], include_in_schema=False)

    # ---------------------------------------------------------------- control API
    def control(method: str, path: str) -> Callable:
        def register(func: Callable[..., Awaitable[Any]]) -> Callable:
            async def endpoint(request: Request) -> Response:
                try:
                    backend.advance()
                    return _json(await func(request))
                except ApiError as exc:
                    return _error(exc)
                except ValueError as exc:  # pydantic ValidationError is a ValueError
                    return _error(ApiError("INVALID_ARGUMENT", str(exc)))
            app.add_api_route(f"/emulator/v1/{path}", endpoint, methods=[method], include_in_schema=False)
            return func
        return register

    @control("POST", "reset")
    async def reset(request: Request) -> dict:
        body = await _body(request)
        _refuse_execution(body)
        scenario = Scenario.model_validate(body) if body else Scenario()
        backend.reset(scenario.model_copy(update=backend.execution))  # the server's own, kept
        auth.configure({})  # a reset emulator accepts requests without a token again
        traffic.clear()
        return {}

    @control("POST", "capacity")
    async def capacity(request: Request) -> dict:
        setting = CapacitySetting.model_validate(await _body(request))
        backend.apply_capacity(setting.model_dump(exclude_unset=True), at_seconds=setting.at_seconds)
        return {"capacity": backend.capacity.snapshot()}

    @control("POST", "quota")
    async def quota(request: Request) -> dict:
        setting = QuotaSetting.model_validate(await _body(request))
        backend.set_quota(setting.model_dump())
        return {"quota": backend.quotas.legacy_view()}

    @control("POST", "quotas")
    async def quotas(request: Request) -> dict:
        setting = QuotasSetting.model_validate(await _body(request))
        if setting.limit is not None or setting.metric is not None:
            if setting.metric is None or setting.limit is None:
                raise ApiError("INVALID_ARGUMENT", "quotas: set both metric and limit (region optional)")
            backend.set_quota_limit(setting.metric, setting.region, setting.limit)
        if setting.deny is not None:
            backend.quotas.deny = setting.deny
        return {"quotas": backend.quotas.view(), "deny": backend.quotas.deny}

    @control("GET", "quotas")
    async def quotas_view(request: Request) -> dict:
        return {"quotas": backend.quotas.view(), "deny": backend.quotas.deny}

    @control("POST", "faults")
    async def faults(request: Request) -> dict:
        backend.faults = Faults.model_validate(await _body(request))
        return backend.faults.model_dump(by_alias=True)

    @control("POST", "auth")
    async def auth_settings(request: Request) -> dict:
        return auth.configure(await _body(request))

    @control("GET", "auth")
    async def auth_records(request: Request) -> dict:
        return auth.records()

    @control("POST", "traffic:start")
    async def traffic_start(request: Request) -> dict:
        return traffic.start()

    @control("POST", "traffic:stop")
    async def traffic_stop(request: Request) -> dict:
        return traffic.stop()

    @control("GET", "traffic")
    async def traffic_view(request: Request) -> dict:
        return traffic.view()

    @control("GET", "stats")
    async def stats(request: Request) -> dict:
        return backend.stats_view()

    @control("GET", "clock")
    async def clock(request: Request) -> dict:
        return {"now": backend.clock.now().isoformat(), "speed": backend.clock.speed}

    @control("POST", "clock:advance")
    async def advance_clock(request: Request) -> dict:
        body = await _body(request)
        backend.clock.advance(bounded_seconds(body.get("seconds", 0), "seconds", MAX_ADVANCE_SECONDS))
        backend.advance()
        return {"now": backend.clock.now().isoformat(), "speed": backend.clock.speed}

    async def dashboard(request: Request) -> Response:
        from airflow_gpu_sched.emulator.dashboard import render

        backend.advance()
        return Response(render(backend), media_type="text/html")

    async def timeline_svg(request: Request) -> Response:
        from airflow_gpu_sched.emulator.timeline import nights
        from airflow_gpu_sched.vertex.timeline import svg

        backend.advance()
        return Response(svg(nights(backend), "Vertex AI emulator: jobs"), media_type="image/svg+xml")

    app.add_api_route("/", dashboard, methods=["GET"], include_in_schema=False)
    app.add_api_route("/emulator/v1/timeline.svg", timeline_svg, methods=["GET"], include_in_schema=False)

    async def by_name(request: Request) -> Response:
        # POST /emulator/v1/{name}:preempt | :setState ; GET /emulator/v1/{name}:history
        path = request.path_params["name"]
        name, _, verb = path.rpartition(":")
        try:
            backend.advance()
            if request.method == "POST" and verb == "preempt":
                return _json(backend.preempt(name))
            if request.method == "POST" and verb == "setState":
                body = await _body(request)
                return _json(backend.set_resource_state(name, body.get("state", ""), body.get("message")))
            if request.method == "GET" and verb == "history":
                return _json(backend.job_history(name))
            raise ApiError("NOT_FOUND", f"{request.method} /emulator/v1/{path} is not a control method.")
        except ApiError as exc:
            return _error(exc)

    app.add_api_route("/emulator/v1/{name:path}", by_name, methods=["GET", "POST"], include_in_schema=False)
    return app
