"""Cloud Logging's ``POST /v2/entries:list`` on the emulator's host: the jobs' log entries
(:mod:`.job_logs`) as Cloud Logging answers them.

Checked as Google checks the request (logging v2 discovery document, ListLogEntriesRequest):
unknown body fields and wrong JSON types are refused with the JSON front end's wording;
``resourceNames`` is required (``projects/P``); ``orderBy`` is "timestamp asc" (default) or
"timestamp desc"; ``pageSize`` defaults to 50, negative is refused, above 1000 is refused (the
older proto's bound, assumed); the filter is read by :mod:`.log_filters`; ``pageToken`` must be
one this method returned for the same filter and order. Requests count in ``/emulator/v1/stats``
(``entries.list``), are recorded by the traffic recorder, and take injected faults like the
Vertex routes.

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.job_logs import ExecutedLines, sort_key, synthetic
from airflow_gpu_sched.emulator.limits import parse_json
from airflow_gpu_sched.emulator.log_filters import parse_log_filter
from airflow_gpu_sched.emulator.methods import SYSTEM_PARAMETERS, unknown_parameter_error
from airflow_gpu_sched.emulator.paging import decode_token, encode_token
from airflow_gpu_sched.vertex.cloud_logging import MAX_PAGE_SIZE, timestamp_key

RPC = "entries.list"
DEFAULT_PAGE_SIZE = 50
_FIELDS = {"resourceNames": list, "projectIds": list, "filter": str, "orderBy": str, "pageSize": int,
           "pageToken": str}
_TYPE_NAMES = {list: "TYPE_STRING", str: "TYPE_STRING", int: "TYPE_INT32"}


def match_logging_route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    return (RPC, {}) if method == "POST" and path == "entries:list" else None


def _refuse_body(body: Any) -> None:
    if not isinstance(body, dict):
        raise ApiError("INVALID_ARGUMENT", 'Invalid JSON payload received. Unknown name "": Root element must be '
                                           "a message.")
    violations = []
    for key, value in body.items():
        kind = _FIELDS.get(key)
        if kind is None:
            text = f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
        elif kind is list and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            text = f"Invalid value at '{_snake(key)}' ({_TYPE_NAMES[kind]}), {json.dumps(value)}"
        elif kind is int and not (isinstance(value, int) and not isinstance(value, bool)
                                  or isinstance(value, str) and value.lstrip("-").isdigit()):
            text = f"Invalid value at '{_snake(key)}' ({_TYPE_NAMES[kind]}), {json.dumps(value)}"
        elif kind is str and not isinstance(value, str):
            text = f"Invalid value at '{_snake(key)}' ({_TYPE_NAMES[kind]}), {json.dumps(value)}"
        else:
            continue
        violations.append(text)
    if violations:
        raise ApiError("INVALID_ARGUMENT", "\n".join(violations), [{
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"description": v} for v in violations]}])


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _token(key: tuple[str, str], flt: str, order: str, names: list[str]) -> str:
    return encode_token(list(key), "entries", flt, order, names)


def _after(token: str, flt: str, order: str, names: list[str]) -> tuple[str, str]:
    """The sort key a token continues after: a signed token of this process only (``paging.py``),
    so a forged, huge or deeply nested one is a 400, never a 500."""
    if not isinstance(token, str):
        raise ApiError("INVALID_ARGUMENT", "page_token is not a token this method returned.")
    try:
        key = decode_token(token, "entries", flt, order, names, field="page_token")
    except ApiError as exc:
        if "not a token" in exc.message:
            raise ApiError("INVALID_ARGUMENT", "page_token is not a token this method returned.") from None
        raise ApiError("INVALID_ARGUMENT", "The values of other method parameters should be identical to those in "
                                           "the previous call (page_token was issued for another filter, order or "
                                           "resource names).") from None
    return (str(key[0]), str(key[1]))


_JOBS_FIRST = re.compile(r'^resource\.type="ml_job" AND resource\.labels\.job_id=(\("[^()]*"\)|"[^"]*")')


def _named_jobs(flt: str) -> set[str] | None:
    """The job ids a filter of :func:`cloud_logging.jobs_filter`'s shape is bound to (its first
    terms, ANDed with the rest), else None: lets a call over a few jobs skip the others."""
    found = _JOBS_FIRST.match(flt)
    return set(re.findall(r'"([^"]*)"', found.group(1))) if found else None


class LogStore:
    """Every job's entries, built on demand from the backend's records."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.executed = ExecutedLines()

    def entries(self, projects: set[str], job_ids: set[str] | None = None) -> list[dict[str, Any]]:
        """``job_ids``: only these jobs' entries (a shortcut; the filter is still applied)."""
        backend = self.backend
        now = backend.clock.now()
        executor = backend.executor
        found: list[dict[str, Any]] = []
        for record in list(backend.jobs.values()):
            if record.project not in projects or (job_ids is not None and record.job.job_id not in job_ids):
                continue
            if executor is not None:
                runs = executor.runs(record.job.name)
                if runs:
                    found += self.executed.read(executor.root / "logs", record, runs, now,
                                                finished=not executor.is_running(record.job.name))
            else:
                found += synthetic(record, now)
        found.sort(key=sort_key)
        return found

    def list(self, body: dict[str, Any]) -> dict[str, Any]:
        _refuse_body(body)
        names = list(body.get("resourceNames") or []) + [f"projects/{p}" for p in body.get("projectIds") or []]
        if not names:
            raise ApiError("INVALID_ARGUMENT", "resource_names is required.")
        projects = set()
        for name in names:
            parts = name.split("/")
            if len(parts) != 2 or parts[0] != "projects" or not parts[1]:
                raise ApiError("INVALID_ARGUMENT", f"Invalid resource name {name!r}: the emulator serves "
                                                   "projects/PROJECT only.")
            projects.add(parts[1])
        order = " ".join(str(body.get("orderBy") or "timestamp asc").split()).lower()
        if order not in ("timestamp asc", "timestamp desc"):
            raise ApiError("INVALID_ARGUMENT", f'Invalid order_by "{body.get("orderBy")}": only "timestamp asc" '
                                               'and "timestamp desc" are permitted.')
        size = int(body.get("pageSize") or DEFAULT_PAGE_SIZE)
        if size < 0 or size > MAX_PAGE_SIZE:
            raise ApiError("INVALID_ARGUMENT", f"page_size must be between 0 and {MAX_PAGE_SIZE} (got {size}).")
        size = size or DEFAULT_PAGE_SIZE
        flt = str(body.get("filter") or "")
        matches = parse_log_filter(flt)
        chosen = [e for e in self.entries(projects, _named_jobs(flt)) if matches(e)]
        if order.endswith("desc"):
            chosen.reverse()
        if body.get("pageToken"):
            after = _after(body["pageToken"], flt, order, sorted(names))
            if order.endswith("desc"):
                chosen = [e for e in chosen if sort_key(e) < after]
            else:
                chosen = [e for e in chosen if sort_key(e) > after]
        if self.backend.scenario.variants.list_pages == "short":  # "keep searching": empty and short pages
            if not body.get("pageToken") and chosen:
                start = ("\U0010ffff", "") if order.endswith("desc") else ("", "")  # before every entry
                return {"nextPageToken": _token(start, flt, order, sorted(names))}
            size = max(1, size // 2)
        page = chosen[:size]
        out: dict[str, Any] = {"entries": page} if page else {}
        if len(chosen) > size:
            out["nextPageToken"] = _token(sort_key(page[-1]), flt, order, sorted(names))
        return out


def add_logging_routes(app: FastAPI, backend: Any, traffic: Any, auth: Any) -> LogStore:
    """``POST /v2/entries:list``, in front of it what the Vertex routes do (count, auth, faults)."""
    store = LogStore(backend)

    async def guard(request: Request, rpc: str) -> Response | None:
        backend.count(rpc)
        refusal = auth.admit(request.headers.get("authorization"), backend.stats)
        if refusal:
            return _json(ApiError("UNAUTHENTICATED", refusal).body(), 401)
        faults = backend.faults
        if faults.latency_seconds:
            await asyncio.sleep(faults.latency_seconds)
        if faults.error_rate and backend.rng.random() < faults.error_rate:
            backend.stats["faultsInjected"] += 1
            status = backend.rng.choice(faults.status_codes)
            name = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(status, "INTERNAL")
            return _json(ApiError(name, f"Injected fault ({status}) for {rpc}.").body(), status)
        backend.advance()
        return None

    async def logging_v2(request: Request, path: str) -> Response:
        found = match_logging_route(request.method, path)
        if found is None:
            return _json(ApiError("NOT_FOUND", f"{request.method} /v2/{path} is not a method the emulator "
                                               "serves.").body(), 404)
        for name in request.query_params.keys():
            if name not in SYSTEM_PARAMETERS:
                error = unknown_parameter_error(name)
                return _json(error.body(), error.http_status)
        early = await guard(request, RPC)
        if early is not None:
            return early
        try:
            raw = await request.body()
            body = parse_json(raw) if raw else {}  # emulator/limits.py: depth, NaN, range
            return _json(store.list(body))
        except ApiError as exc:
            return _json(exc.body(), exc.http_status)

    app.add_api_route("/v2/{path:path}", traffic.wrap(logging_v2, match_logging_route), methods=["POST", "GET"],
                      include_in_schema=False)
    return store


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), status_code=status,
                    media_type="application/json")


__all__ = ["LogStore", "add_logging_routes", "match_logging_route", "timestamp_key"]
