"""The I/O of the plugin: the DAG runs, training task instances and their XCom results, read
through Airflow's REST API v2 with the signed-in user's own token, so a user sees only what
Airflow lets them read (the plugin holds no credential and reads no database of its own).

Calls per page: one list of runs (none for a single run), one list of the runs' training task
instances (``operator`` filter, paged), one GET per training task's XCom result (concurrent).

May import: ui; airflow.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

# The operators whose XCom results the plugin reads (the TI's `operator`, its class name); a
# subclass of your own is listed with the `operator=` query parameter of the page.
TRAINING_OPERATORS = ("GpuTrainingOperator", "FlexStartTrainingOperator", "SpotTrainingOperator",
                      "PersistentResourceTrainingOperator", "VertexTrainingOperator")
# a failed try's record: the XCom key of orchestration/failure_record.py (not imported: ui reads
# only vertex), pushed by a try that failed (the task then up for retry or failed)
FAILURE_KEY = "training_failure"
FAILED_STATES = ("failed", "up_for_retry", "up_for_reschedule")
PAGE = 100  # Airflow's default [api] maximum_page_limit
MAX_TASKS = 500  # training task instances per page view, at most


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class TaskRecord:
    task_id: str
    map_index: int
    state: str | None
    result: dict[str, Any] | None = None


@dataclass
class RunRecord:
    dag_id: str
    run_id: str
    run_after: str | None
    state: str | None
    tasks: list[TaskRecord] = field(default_factory=list)


def credential(headers: dict[str, str], cookies: dict[str, str]) -> str | None:
    """The caller's Airflow token: its ``Authorization: Bearer`` header (as the API reads it first),
    else the UI's ``_token`` session cookie."""
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip()
    return cookies.get("_token") or None


def _q(value: str) -> str:
    return quote(value, safe="")


class AirflowApi:
    def __init__(self, base: str, token: str, client: Any):
        self.base = base.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client = client

    async def get(self, path: str, params: Any = None) -> Any:
        response = await self.client.get(f"{self.base}/{path}", params=params, headers=self.headers)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:300]
            raise ApiError(response.status_code, f"GET /api/v2/{path.split('?')[0]}: {response.status_code} {detail}")
        return response.json()

    async def pages(self, path: str, key: str, params: list[tuple[str, Any]], most: int) -> list[dict]:
        out: list[dict] = []
        while len(out) < most:
            page = await self.get(path, [*params, ("limit", PAGE), ("offset", len(out))])
            out.extend(page[key])
            if len(page[key]) < PAGE or len(out) >= page.get("total_entries", 0):
                break
        return out[:most]


async def fetch(api: AirflowApi, dag_id: str | None, run_id: str | None, nights: int,
                operators: tuple[str, ...] = TRAINING_OPERATORS, now: datetime | None = None) -> list[RunRecord]:
    """One run (``dag_id`` and ``run_id``), a DAG's last ``nights`` runs, or every DAG's runs of the
    last ``nights`` days; newest first, with their training tasks and XCom results."""
    dag = _q(dag_id) if dag_id else "~"
    if run_id:
        raw = [await api.get(f"dags/{dag}/dagRuns/{_q(run_id)}")]
    elif dag_id:
        raw = (await api.get(f"dags/{dag}/dagRuns", [("order_by", "-run_after"), ("limit", nights)]))["dag_runs"]
    else:
        since = (now or datetime.now(timezone.utc)) - timedelta(days=nights)
        raw = await api.pages("dags/~/dagRuns", "dag_runs", [("order_by", "-run_after"),
                                                              ("run_after_gte", since.isoformat())], 200)
    runs = {(r["dag_id"], r["dag_run_id"]): RunRecord(r["dag_id"], r["dag_run_id"], r.get("run_after"), r.get("state"))
            for r in raw}
    if not runs:
        return []
    params: list[tuple[str, Any]] = [("operator", name) for name in operators]
    if run_id:
        path = f"dags/{dag}/dagRuns/{_q(run_id)}/taskInstances"
    else:
        path = f"dags/{dag}/dagRuns/~/taskInstances"
        oldest = min((r.run_after for r in runs.values() if r.run_after), default=None)
        if oldest:
            params.append(("run_after_gte", oldest))
    for ti in await api.pages(path, "task_instances", params, MAX_TASKS):
        run = runs.get((ti["dag_id"], ti["dag_run_id"]))
        if run is not None:
            run.tasks.append(TaskRecord(ti["task_id"], ti.get("map_index", -1), ti.get("state")))

    async def result(run: RunRecord, task: TaskRecord) -> None:
        # a return value is pushed only when the task succeeds; a try that failed pushed its
        # attempts and error before raising (the operator's failed-try record)
        key = "return_value" if task.state == "success" else FAILURE_KEY if task.state in FAILED_STATES else None
        if key is None:
            return
        try:
            entry = await api.get(f"dags/{_q(run.dag_id)}/dagRuns/{_q(run.run_id)}/taskInstances/"
                                  f"{_q(task.task_id)}/xcomEntries/{key}", [("map_index", task.map_index)])
        except ApiError as error:
            if error.status == 404:
                return
            raise
        value = entry.get("value")
        if isinstance(value, dict) and isinstance(value.get("attempts"), list):
            task.result = value

    await asyncio.gather(*(result(run, task) for run in runs.values() for task in run.tasks))
    for run in runs.values():
        run.tasks.sort(key=lambda t: (t.task_id, t.map_index))
    return list(runs.values())
