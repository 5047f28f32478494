"""The platform team's commands: ``jobs list``, ``jobs orphans [--cancel]``, ``plan check``, ``quota check``.

Each command is a pure part (rows from jobs, task instances or operators) and a thin shell
that reads Vertex AI (the client), the Airflow metadata DB (its ORM session) or a DAG file
(Airflow's DagBag), and prints its rows (``tools/output.py``: ``-o table|json|yaml|plain``).

Which deployment owns a job: its ``airflow-deployment`` label (``orchestration/deployment.py``);
``jobs orphans`` judges and cancels this deployment's jobs only. Which task instance owns a job:
the operators label every job with ``managed-by``, ``airflow-dag``, ``airflow-task``, ``airflow-map-index`` (mapped tasks), ``airflow-run`` and
``airflow-try`` (see ``orchestration/training_spec.py`` ``labels``). Label values are lowercased and cut to
63 characters, so a job is matched to the task instances whose ids give the same label values.
A job with no ``airflow-run`` label (submitted before the label existed) is matched to that
task in every run: it counts as an orphan only when none of them is alive.

May import: vertex, orchestration, operators, tools; airflow only inside functions.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

from airflow_gpu_sched.orchestration.deployment import DEPLOYMENT_LABEL, OTHER, THIS, UNKNOWN
from airflow_gpu_sched.orchestration.ledger import SUBMISSION_LABEL
from airflow_gpu_sched.orchestration.orphans import (  # noqa: F401 (the decision, re-exported)
    ALIVE_STATES, MANAGED_FILTER, JobRow, Orphan, TaskInstanceRow, find_orphans, label_value, link_children)
from airflow_gpu_sched.tools.exit_codes import ApiError, UsageError


class CommandError(UsageError):
    """What the user must fix (a connection, a file): printed as ``error: ...``, exit 2."""


WAIT_SECONDS = 20.0  # --wait: how long a command retries an unreachable or overloaded endpoint


def logs_to_stderr() -> Callable[[], None]:
    """Every log line on stderr: stdout is the command's output (``-o json | jq``). Importing Airflow
    configures its logging with a console handler on stdout (``airflow`` itself moves it for
    commands with ``-o``; ``airflow-gpu-sched`` must do the same): a secrets-masker warning
    printed while a connection was read once came out ahead of the JSON. Returns what puts
    Airflow's structlog output back when the command ends (the command may run inside a process
    that goes on: a test)."""
    import airflow  # noqa: F401 (its import configures the handlers this moves)

    moved = [(h, h.stream) for h in logging.getLogger().handlers
             if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout]
    for handler, _ in moved:
        handler.setStream(sys.stderr)
    # Airflow's structlog loggers made from here on: their factory's output unset means stdout
    # (Airflow 3.1 printed a connection warning ahead of the JSON that way)
    factory = None
    with contextlib.suppress(Exception):  # no structlog set up: nothing more to move
        import structlog

        factory = structlog.get_config().get("logger_factory")
    if not hasattr(factory, "io") or factory.io is not None:
        factory = None
    else:
        factory.io = _Stderr(binary="Bytes" in getattr(getattr(factory, "cls", None), "__name__", ""))

    def restore() -> None:  # the handlers too: left on this moment's sys.stderr (a test's capture,
        for handler, stream in moved:  # closed after it), a later task's log lines went nowhere
            handler.setStream(stream)  # (Airflow 3.1, the matrix's slice under xdist)
        if factory is not None:
            factory.io = None

    return restore


class _Stderr:
    """``sys.stderr`` as it is at each write (a test's capture, replaced between tests, included)."""

    def __init__(self, binary: bool):
        self.binary = binary

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr.buffer if self.binary else sys.stderr, name)


def make_client(conn_id: str, location: str, project: str | None = None, api_endpoint: str | None = None,
                wait: bool = False):
    """A client from the Airflow connection; with ``api_endpoint`` and no such connection, a plain
    one for that endpoint (the emulator needs no credentials). Someone is waiting at a terminal:
    without ``wait`` a call is not retried (an unreachable endpoint is one error line at once)."""
    from airflow_gpu_sched import compat
    from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient

    AirflowNotFoundException = compat.AirflowNotFoundException

    retry = RetryPolicy(initial=0.5, maximum=5.0, deadline=WAIT_SECONDS if wait else 0.0)
    extra = {"api_endpoint": api_endpoint} if api_endpoint else {}
    try:
        return VertexClient.from_connection(conn_id, location=location, project=project, retry=retry, **extra)
    except AirflowNotFoundException as exc:
        if api_endpoint:
            return VertexClient(location, project=project, api_endpoint=api_endpoint, retry=retry)
        raise CommandError(f"{exc}: create it (`airflow connections add {conn_id} --conn-type "
                           "google_cloud_platform ...`) or pass --conn-id") from None


# ---------------------------------------------------------------------------------- jobs list

def job_row(job_type: Any, resource: Any) -> JobRow:
    """One listed resource (any job type) as a row: owner from its labels, the rest from its spec."""
    view = job_type.view(resource)
    labels = view.labels or {}
    scheduling = view.job_spec.scheduling
    strategy = scheduling.strategy if scheduling is not None and scheduling.strategy is not None else None
    if view.job_spec.persistent_resource_id:
        strategy = "PERSISTENT_RESOURCE"

    def when(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return JobRow(name=view.name or "", job_type=job_type.key, dag=labels.get("airflow-dag"),
                  task=labels.get("airflow-task"), map_index=labels.get("airflow-map-index"),
                  run=labels.get("airflow-run"), try_number=labels.get("airflow-try"),
                  strategy=_name(strategy) or "STANDARD",  # no strategy given: on-demand VMs
                  state=_name(view.state), created=when(view.create_time), started=when(view.start_time),
                  ended=when(view.end_time), submission=labels.get(SUBMISSION_LABEL),
                  deployment=labels.get(DEPLOYMENT_LABEL))


# `jobs list`'s table without --wide: at most 120 columns (issue 41: full names and timestamps
# made it 250 wide). Each column's cap; the id is int64 (19 digits at most), the states and
# strategies are closed sets (PARTIALLY_SUCCEEDED is the longest state once its prefix is cut).
SHORT_JOB_COLUMNS = {"dag": 24, "task": 20, "try": 3, "strategy": 10, "state": 19, "created": 8, "job": 19}
_STRATEGY_SHORT = {"PERSISTENT_RESOURCE": "PERSISTENT"}


def short_job_rows(rows: list[JobRow], now: Any) -> list[dict[str, str | None]]:
    """The rows of `jobs list`'s narrow table (pure): task with its map index, state without its
    prefix, creation as an age ("5m ago"), the job by its id; long ids cut to their column."""
    from airflow_gpu_sched.tools.output import printable, shorten

    def task(row: JobRow) -> str | None:
        return row.task if row.map_index in (None, "") or row.task is None else f"{row.task}[{row.map_index}]"

    short = []
    for row in rows:
        state = (row.state or "").removeprefix("JOB_STATE_").removeprefix("PIPELINE_STATE_") or None
        cells = {"dag": row.dag, "task": task(row), "try": row.try_number,
                 "strategy": _STRATEGY_SHORT.get(row.strategy or "", row.strategy), "state": state,
                 "created": age(row.created, now), "job": row.name.rsplit("/", 1)[-1] or None}
        # escaped first (an ESC is 4 characters once written as \x1b), then cut: the cap holds
        short.append({key: shorten(None if value is None else printable(value), SHORT_JOB_COLUMNS[key])
                      for key, value in cells.items()})
    return short


def age(when: str | None, now: Any) -> str | None:
    """An ISO time as how long ago it was: "45s ago", "12m ago", "3h ago", "9d ago" (at most 8 wide)."""
    from datetime import datetime

    if not when:
        return None
    seconds = max(0, int((now - datetime.fromisoformat(when)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{min(seconds // size, 9999)}{unit} ago"
    return f"{seconds}s ago"


def _name(value: Any) -> str | None:
    return None if value is None else getattr(value, "value", None) or str(value)


MAX_PAGES = 200  # x PAGE_SIZE: 100,000 jobs of one type in one region before a listing gives up
PAGE_SIZE = 500


class EndlessListing(ApiError):
    """The endpoint kept answering a nextPageToken: exit 3 (docs/cli.md)."""


def list_all(client: Any, job_type: Any, flt: str = MANAGED_FILTER, max_pages: int = MAX_PAGES) -> Iterator[Any]:
    """Every resource of one type matching ``flt``, page after page, bounded: a token the endpoint
    gave before (it would loop) or more than ``max_pages`` pages ends it with :class:`EndlessListing`."""
    token, seen = None, set()
    for _ in range(max_pages):
        page = job_type.list_page(client, flt, PAGE_SIZE, token)
        yield from job_type.items(page)
        if not (token := page.next_page_token):
            return
        if token in seen:
            raise EndlessListing(f"listing {job_type.key}s: the endpoint answered a nextPageToken it had given "
                                 f"before: it would page forever (stopped after {len(seen) + 1} pages)")
        seen.add(token)
    raise EndlessListing(f"listing {job_type.key}s: more than {max_pages} pages of {PAGE_SIZE}: stopped (an "
                         "endpoint that never stops paging, or a filter to narrow with --job-type)")


def list_jobs(client: Any, job_types: Iterable[Any]) -> list[JobRow]:
    rows = [job_row(job_type, resource) for job_type in job_types for resource in list_all(client, job_type)]
    return sorted(link_children(rows), key=lambda r: (r.created or "", r.name))


def cancel_job(client: Any, name: str) -> str:
    """Cancel one job; what happened, as a line for the user. A job that ended since it was listed
    is no error: Vertex answers its cancel with 400 FAILED_PRECONDITION or does nothing ("If the
    job is already finished, the command will not perform an operation", gcloud ai-platform jobs
    cancel); a cancel may also end SUCCEEDED or FAILED ("success is not guaranteed")."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.vertex.client import InvalidArgumentError

    try:
        job_type_of(name).cancel(client, name)
    except InvalidArgumentError as exc:
        return f"not cancelled (it has already ended): {name}: {exc}"
    return f"cancel requested: {name}"

# ---------------------------------------------------------------------------------- jobs orphans

def this_deployment() -> str | None:
    """This deployment's id (``[gpu_sched] deployment_id``, else the Variable in the metadata DB;
    docs/reaper.md); None before any job was submitted with the Variable. A bad one raises
    DeploymentIdError, a ValueError: exit 2."""
    from airflow_gpu_sched.orchestration import deployment

    return deployment.read_from_database()


NOT_CANCELLED = {
    OTHER: "not cancelled: another deployment's job (its own reaper and `jobs orphans` judge it)",
    UNKNOWN: ("not cancelled: no airflow-deployment label (submitted before the label existed, or by "
              "another tool); if it is yours, cancel it by name: gcloud ai custom-jobs cancel NAME --region R"),
}


def orphan_rows(orphans: list[Orphan]) -> list[dict[str, Any]]:
    """This deployment's orphans first (the ones ``--cancel`` cancels), then the others', marked."""
    ordered = sorted(orphans, key=lambda o: not o.cancellable)
    return [{**asdict(o.job), "owner": o.owner,
             "why": o.why if o.cancellable else f"{o.why}; {NOT_CANCELLED[o.owner]}"} for o in ordered]

def read_task_instances(dag_labels: set[str]) -> list[TaskInstanceRow]:
    """The task instances of the DAGs whose ids give these label values, from the metadata DB."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_ids = [d for d in session.scalars(select(TaskInstance.dag_id).distinct()) if label_value(d) in dag_labels]
        if not dag_ids:
            return []
        query = select(TaskInstance.dag_id, TaskInstance.task_id, TaskInstance.map_index, TaskInstance.run_id,
                       TaskInstance.state, TaskInstance.try_number).where(TaskInstance.dag_id.in_(dag_ids))
        return [TaskInstanceRow(d, t, m, r, _name(s), n or 0) for d, t, m, r, s, n in session.execute(query)]


# ---------------------------------------------------------------------------------- DAG files

def training_tasks(dag_file: str) -> list[Any]:
    """The training operators of every DAG in the file, loaded as Airflow's DAG processor would."""
    if not os.path.isfile(dag_file):  # before importing Airflow: seconds saved on a typo
        raise CommandError(f"{dag_file}: no such file")
    from airflow_gpu_sched import compat
    from airflow_gpu_sched.operators.base import VertexTrainingOperator

    # Airflow puts the DAGs folder on sys.path, so DAG files import their neighbours: do the same.
    folder = os.path.dirname(os.path.abspath(dag_file))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    with _quiet("airflow.dag_processing"):  # its log lines would mix with the table/JSON; errors come below
        bag = compat.dag_bag(dag_file, safe_mode=False)
    if bag.import_errors:
        raise CommandError(f"{dag_file}: " + "\n".join(_exception_text(err) for err in bag.import_errors.values()))
    return [task for dag_id in sorted(bag.dags) for task in bag.dags[dag_id].tasks
            if isinstance(task, VertexTrainingOperator)]


def _exception_text(error: str) -> str:
    """An import error without its traceback (Airflow stores them with one): the exception's lines."""
    lines = error.strip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if not frames:
        return error.strip()
    rest = lines[frames[-1] + 1:]
    start = next((i for i, line in enumerate(rest) if not line.startswith(" ")), 0)
    return "\n".join(rest[start:])


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the load's log lines: its errors are reported after
            yield
    finally:
        log.setLevel(level)


@dataclass(frozen=True)
class StepRow:
    dag: str
    task: str
    position: int
    step: str
    regions: list[str]
    rules: list[str]
    violations: list[str]
    cost: list[str] = field(default_factory=list)  # per region: expected cost and whether the budget allows it


def rule_sets(task: Any, step: Any) -> list[str]:
    """The groups of ``vertex/rules.py`` a step's job is checked against (``check_job_spec``)."""
    found = ["general"]
    if step.resource_id:
        found.append("persistent resource")  # the reference here; the pool's fit when the task runs
    elif step.strategy in ("FLEX_START", "SPOT"):
        found.append(step.strategy)
    elif step.strategy == "RESERVATION":
        found.append("reservation")  # the name and zone here; the fit on its VMs when the task runs
    if task.job_kind.key != "custom_job":
        found.append(task.job_kind.key)
    return found


def plan_rows(task: Any) -> list[StepRow]:
    """Each step of the task's plan, its regions in the order tried, and the rules its job breaks
    (as the operator checks them before submitting; templated fields are checked once rendered)."""
    from airflow_gpu_sched.orchestration import job_spec
    from airflow_gpu_sched.orchestration.budget import plan_check_cells
    from airflow_gpu_sched.orchestration.hardware import name_violations

    if isinstance(getattr(task, "plan_spec", None), str):  # a file or a template of the whole plan
        return [StepRow(task.dag_id, task.task_id, 0, f"plan {task.plan_spec.strip()!r}: checked once rendered",
                        [], [], [])]
    order = task.positions()
    rows = []
    for index, planned in enumerate(task.plan):
        regions = [region for i, region in order if i == index]
        for step, step_regions in _members(planned, regions, task.location):
            found = name_violations(job_spec.violations(task.build_job(step=step), ignore_templates=True),
                                    step.hardware_origin)  # an alternative's field: plan[i].hardware[k].<field>
            label = step.describe() if step is planned else f"{planned.describe()}: {step.describe()}"
            rows.append(StepRow(task.dag_id, task.task_id, index, label, step_regions, rule_sets(task, step),
                                [str(v) for v in found], plan_check_cells(task, step, step_regions)))
    return rows


def _members(step: Any, regions: list[str], default_location: str) -> list[tuple[Any, list[str]]]:
    """A race's members, each with the one region it runs in (all submitted at once, so each
    is checked and needs its quota); any other step as itself, with its regions."""
    members = getattr(step, "members", None)
    if not members:
        return [(step, regions)]
    return [(member, [step.member_location(i, default_location)]) for i, member in enumerate(members)]


@dataclass(frozen=True)
class QuotaRow:
    dag: str
    task: str
    step: str
    region: str
    metric: str
    need: int
    limit: int | None
    verdict: str


def quota_rows(task: Any, client_for: Any, project: str | None = None) -> list[QuotaRow]:
    """What each (step, region) of the task holds at once against the region's quota."""
    from airflow_gpu_sched.orchestration import training_spec
    from airflow_gpu_sched.orchestration.quota import NO_QUOTA_STRATEGIES, UNLIMITED, at_once, metric_for
    from airflow_gpu_sched.vertex.client import VertexError
    from airflow_gpu_sched.vertex.job_type_models import quota_limit

    project = project or task.project_id
    parallel = task.job_kind.parallelism(training_spec.job_options(task))
    rows: list[QuotaRow] = []
    infos_by_region: dict[str, Any] = {}
    checks = [member for index, region in task.positions()
              for member in _members(task.plan[index], [region], task.location)]
    for step, (region,) in checks:
        if step.strategy in NO_QUOTA_STRATEGIES:
            rows.append(QuotaRow(task.dag_id, task.task_id, step.strategy, region, "-", 0, None,
                                 "no quota: the persistent resource's VMs exist"))
            continue
        demand = task.build_job(step=step).job_spec.accelerator_demand()
        for accelerator, need in demand.items():
            metric = metric_for(accelerator, step.strategy)
            if region not in infos_by_region:
                try:
                    infos_by_region[region] = list(client_for(region).list_quota_infos(project))
                except VertexError as exc:
                    infos_by_region[region] = exc
            infos = infos_by_region[region]
            if isinstance(infos, Exception):
                rows.append(QuotaRow(task.dag_id, task.task_id, step.strategy + step.hardware_text, region, metric,
                                     need * parallel, None, f"unreadable: {type(infos).__name__}"))
                continue
            limit = quota_limit(infos, metric, region)
            if limit is None or limit <= UNLIMITED:
                verdict = "ok (no limit reported)"
            elif need > limit:  # not even one copy (trial) fits: Vertex refuses it (quota.at_once)
                verdict = f"TOO LOW: needs {need}, limit {limit}"
            elif need * parallel > limit:
                verdict = (f"ok: {at_once(limit, need, parallel)} of {parallel} parallel trials at once, "
                           "the others wait for quota")
            else:
                verdict = "ok"
            rows.append(QuotaRow(task.dag_id, task.task_id, step.strategy + step.hardware_text, region, metric,
                                 need * parallel, limit, verdict))  # an alternative: its own accelerator's quota
    return rows


def region_quota_rows(client: Any, project: str | None, region: str) -> list[dict[str, Any]]:
    """The region's GPU training quotas (the metrics the strategies draw on), without a DAG."""
    rows = []
    for info in client.list_quota_infos(project):
        metric = info.metric or ""
        if "custom_model_training_" in metric and metric.endswith("_gpus"):
            limit = info.limit_for(region)
            rows.append({"metric": metric, "region": region, "limit": "unlimited" if limit == -1 else limit})
    return sorted(rows, key=lambda r: r["metric"])
