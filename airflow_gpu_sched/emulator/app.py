"""HTTP surface of the emulator: Vertex AI v1 routes plus a control API for tests and demos.

The Vertex methods are a table (:mod:`urls`: method, path regex, rpc name) answered by another
(:mod:`responses`: rpc name -> the backend call), as moto's ``urls.py`` -> ``responses.py``;
the control API is a table too (:mod:`control_api`). This module adds what every Vertex route
shares: the token check, unknown query parameters, injected faults and the stats count (every
Vertex route counts in ``/emulator/v1/stats`` and is subject to injected faults; control routes
(``/emulator/v1/...``) are neither), and the stand-ins of Google's token services.
``traffic.py`` records Vertex exchanges on request.

May import: vertex, drawing, emulator; never airflow.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.auth import StandInError, TokenIssuer
from airflow_gpu_sched.emulator.backend import Backend
from airflow_gpu_sched.emulator.control_api import add_control_routes
from airflow_gpu_sched.emulator.guard import Guard, GuardSettings
from airflow_gpu_sched.emulator.limits import parse_json
from airflow_gpu_sched.emulator.service_date import ServiceDate
from airflow_gpu_sched.emulator.logging_api import add_logging_routes
from airflow_gpu_sched.emulator.methods import query_refusal
from airflow_gpu_sched.emulator.proto_json import canonical
from airflow_gpu_sched.emulator.responses import error_response, json_response, read_body, respond
from airflow_gpu_sched.emulator.traffic import TrafficRecorder
from airflow_gpu_sched.emulator.urls import match_route

# an injected fault's HTTP status -> its rpc status name
_FAULT_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}


def _injected_fault(backend: Backend, rpc: str) -> tuple[Response | None, bool]:
    """A fault the scenario injects into this call (or None), and whether the call still runs
    (only a 5xx can come after the work was done: a 429 means the request was refused)."""
    faults = backend.faults
    if not (faults.error_rate and backend.rng.random() < faults.error_rate):
        return None, True
    backend.stats["faultsInjected"] += 1
    status = backend.rng.choice(faults.status_codes)
    name = _FAULT_STATUS.get(status, "INTERNAL")
    fault = json_response(ApiError(name, f"Injected fault ({status}) for {rpc}.").body(), status)
    runs = status >= 500 and bool(faults.after_handler_rate) and backend.rng.random() < faults.after_handler_rate
    return fault, runs


async def vertex(request: Request, path: str) -> Response:
    """``/v1/{path}``: one Vertex method of :data:`urls.ROUTES`."""
    backend, auth = request.app.state.backend, request.app.state.auth
    found = match_route(request.method, path)
    if found is None:
        return error_response(ApiError("NOT_FOUND", f"{request.method} /v1/{path} is not a method the emulator serves."))
    rpc, args = found
    backend.count(rpc)
    refusal = auth.admit(request.headers.get("authorization"), backend.stats)
    if refusal:
        return error_response(ApiError("UNAUTHENTICATED", refusal))
    unknown = query_refusal(rpc, request.query_params.keys())  # a parameter the method lacks: 400
    if unknown:
        return error_response(unknown)
    if backend.faults.latency_seconds:
        await asyncio.sleep(backend.faults.latency_seconds)
    fault, runs = _injected_fault(backend, rpc)
    if not runs:
        return fault
    backend.advance()
    try:
        # printed as Google's servers print: no default of a field without presence
        response = json_response(canonical(rpc, await respond(backend, rpc, args, request)))
    except ApiError as exc:
        response = error_response(exc)
    return fault or response  # a fault after the handler: done, but the answer is lost


async def ui(request: Request, path: str) -> Response:
    # Google's GAPIC REST clients get operations at /ui/{name=projects/*/locations/*/operations/*}
    # (and .../persistentResources/*/operations/*): google.longrunning.Operations.GetOperation's
    # first http rule in aiplatform_v1's rest_base.py. Only operations are served there.
    found = match_route(request.method, path)
    if found is None or not found[0].endswith("operations.get"):
        return error_response(ApiError("NOT_FOUND", f"{request.method} /ui/{path} is not a method the emulator serves."))
    return await vertex(request, path)


async def token(request: Request) -> Response:
    # Google's OAuth token endpoint, as a service-account key's token_uri (the JWT
    # assertion is not checked: the emulator only hands out its one token)
    backend, auth = request.app.state.backend, request.app.state.auth
    form = {k: v[-1] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
    try:
        issuer = _assertion_issuer(form.get("assertion"))
    except ApiError as exc:  # OAuth's error shape, as Google's token endpoint answers a bad JWT
        return json_response({"error": "invalid_grant", "error_description": f"Invalid JWT: {exc.message}"}, 400)
    backend.stats["tokensIssued"] = backend.stats.get("tokensIssued", 0) + 1
    auth.record_grant(form.get("grant_type"), issuer)
    return json_response(auth.token_response())


async def not_served(request: Request, exc: StarletteHTTPException) -> Response:
    # the router's own 404/405 (a path or method no route serves, an OPTIONS preflight) in
    # Google's error shape, as NOT_FOUND (what Google's front end answers: assumed)
    return error_response(ApiError("NOT_FOUND", f"{request.method} {request.url.path[:200]} is not a method the "
                                                "emulator serves."))


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
            body = await read_body(request)
            answer = auth.generate_access_token(account, body, request.headers.get("authorization"))
        except (ApiError, StandInError) as exc:
            return error_response(exc if isinstance(exc, ApiError) else ApiError(exc.status, exc.message))
        count("tokensImpersonated")
        return json_response(answer)

    async def exchange_token(request: Request) -> Response:
        # RFC 8693 over a form body (what google-auth's sts client sends); errors in OAuth's shape
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
        try:
            answer = auth.exchange_token(form)
        except StandInError as exc:
            return json_response({"error": exc.status, "error_description": exc.message}, 400)
        count("tokensExchanged")
        return json_response(answer)

    async def access_secret(request: Request, project: str, secret: str, version: str) -> Response:
        try:
            answer = auth.access_secret(project, secret, version, request.headers.get("authorization"))
        except StandInError as exc:
            return error_response(ApiError(exc.status, exc.message))
        count("secretsAccessed")
        return json_response(answer)

    app.add_api_route("/v1/projects/-/serviceAccounts/{account}:generateAccessToken", generate_access_token,
                      methods=["POST"], include_in_schema=False)
    app.add_api_route("/v1/token", exchange_token, methods=["POST"], include_in_schema=False)
    app.add_api_route("/v1/projects/{project}/secrets/{secret}/versions/{version}:access", access_secret,
                      methods=["GET"], include_in_schema=False)


def create_app(backend: Backend | None = None, *, allow_remote: bool = False,
               control_token: str | None = None) -> FastAPI:
    """``allow_remote``: answer requests for any Host/Origin (emulator/guard.py);
    ``control_token``: the token ``/emulator/v1/...`` requests must carry."""
    from airflow_gpu_sched.emulator.billing_api import add_billing_routes
    from airflow_gpu_sched.emulator.reservations import add_compute_routes

    backend = backend or Backend()
    app = FastAPI(title="airflow-gpu-sched Vertex AI emulator", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.backend = backend
    app.state.guard = GuardSettings(allow_remote=allow_remote, control_token=control_token)
    app.add_middleware(Guard, settings=app.state.guard)
    app.add_middleware(ServiceDate, clock=lambda: backend.clock)  # outermost: the Guard's refusals dated too
    app.add_exception_handler(StarletteHTTPException, not_served)
    auth = app.state.auth = TokenIssuer()
    traffic = app.state.traffic = TrafficRecorder()
    _add_token_services(app, backend, auth)  # before /v1/{path}: these paths are not Vertex methods
    add_billing_routes(app, backend, traffic, auth)  # Cloud Billing's GET /v1/services/{s}/skus, also before
    app.add_api_route("/v1/{path:path}", traffic.wrap(vertex, match_route), methods=["GET", "POST", "DELETE", "PATCH"],
                      include_in_schema=False)
    app.state.logs = add_logging_routes(app, backend, traffic, auth)  # Cloud Logging's POST /v2/entries:list
    app.add_api_route("/ui/{path:path}", ui, methods=["GET"], include_in_schema=False)
    add_compute_routes(app, backend, auth)  # Compute Engine reservations at /compute/v1/...
    app.add_api_route("/token", token, methods=["POST"], include_in_schema=False)
    add_control_routes(app)
    return app
