"""The plugin's web app (mounted by Airflow's api-server at ``/gpu-sched``):

    /gpu-sched/?nights=3                      every DAG's training tasks of the last 3 days
    /gpu-sched/dags/{dag_id}?nights=7         a DAG's last 7 runs
    /gpu-sched/dags/{dag_id}/runs/{run_id}    one run

Each page reads through the REST API v2 of the same api-server with the caller's own token (the
Authorization header, else the UI's session cookie): no token, no data; the API's 401/403 are
passed on.

May import: ui; airflow.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse

from airflow_gpu_sched.ui import PREFIX, page
from airflow_gpu_sched.ui.source import TRAINING_OPERATORS, AirflowApi, ApiError, credential, fetch

MAX_NIGHTS = 60


def _roots(request: Request) -> tuple[str, str | None]:
    """(the plugin's root path, the REST API's URL on this very api-server). The API is called on
    the socket that took the request (``scope["server"]``), never on the Host header the client
    sent: a forged Host cannot make the server fetch from another machine. No ``server`` (a
    server that does not say its socket): no API URL, rather than a guessed host that would be
    sent the caller's token."""
    root = request.scope.get("root_path", "").rstrip("/")
    server = request.scope.get("server")
    if not server or not server[0] or server[1] is None:
        return root + "/", None
    host, port = server
    host = f"[{host}]" if ":" in host else host
    return root + "/", f"{request.url.scheme}://{host}:{port}{root.removesuffix(PREFIX)}/api/v2"


async def _page(request: Request, heading: str, dag_id: str | None, run_id: str | None, nights: int,
                operators: list[str]) -> HTMLResponse:
    root, api_url = _roots(request)
    links = [("all DAGs, last 3 days", root + page.href(nights=3)), ("last 7 days", root + page.href(nights=7))]
    if dag_id:
        links.append((f"{dag_id}: last 7 runs", root + page.href("dags", dag_id, nights=7)))
        links.append((f"{dag_id}: last 30 runs", root + page.href("dags", dag_id, nights=30)))
    token = credential(dict(request.headers), dict(request.cookies))
    if token is None:
        return HTMLResponse(page.render([], heading, links, "Not signed in to Airflow: sign in, then reload."), 401)
    if api_url is None:
        return HTMLResponse(page.render([], heading, links, "This server does not say which address it listens "
                                        "on (no ASGI scope['server']): the page reads nothing rather than send "
                                        "your token to a guessed host."), 503)
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            runs = await fetch(AirflowApi(api_url, token, client), dag_id, run_id, nights,
                               tuple(operators) or TRAINING_OPERATORS)
    except ApiError as error:
        return HTMLResponse(page.render([], heading, links, str(error)), error.status)
    return HTMLResponse(page.render(runs, heading, links, console_domain=_console_domain()))


def _console_domain() -> str:
    """``[gpu_sched] console_domain`` (the host console links may point to), as the links were built with."""
    from airflow_gpu_sched import compat

    return (compat.conf.get("gpu_sched", "console_domain", fallback=None) or page.DEFAULT_CONSOLE).strip().lower()


def create_app() -> FastAPI:
    app = FastAPI(title="airflow-gpu-sched: the night at a glance", docs_url=None, redoc_url=None, openapi_url=None)
    nights_q = Query(3, ge=1, le=MAX_NIGHTS, description="days (all DAGs) or runs (one DAG)")
    operator_q = Query([], description="operator class names to read, instead of this package's")

    @app.get("/", response_class=HTMLResponse)
    async def all_dags(request: Request, nights: int = nights_q, operator: list[str] = operator_q):
        return await _page(request, f"GPU training, all DAGs, last {nights} days", None, None, nights, operator)

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    async def one_dag(request: Request, dag_id: str, nights: int = Query(7, ge=1, le=MAX_NIGHTS),
                      operator: list[str] = operator_q):
        return await _page(request, f"GPU training of {dag_id}, last {nights} runs", dag_id, None, nights, operator)

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse)
    async def one_run(request: Request, dag_id: str, run_id: str, operator: list[str] = operator_q):
        return await _page(request, f"GPU training of {dag_id}, run {run_id}", dag_id, run_id, 1, operator)

    return app
