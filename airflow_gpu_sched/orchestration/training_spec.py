"""The training spec of an operator: its arguments, grouped, stored and checked, and the job they
build. The operator's signature stays flat (operators/base.py); this module reads what it stored.

Groups of arguments:

- the job: what every job type submits (the pools, or their one-pool shorthand, the whole
  ``job_spec``, labels, service account, output dir, run-time limit);
- the job type: ``job_type`` and what a tuning job or a training pipeline adds;
- the plan: the steps and their knobs (regions, deadline, prices, budgets, retries);
- the connection: where and how the service is reached, and how the task waits;
- observability: callbacks and the job's log lines.

Every function takes the operator (``op``) as the holder of the stored arguments and does no
I/O: the job is built and checked against :mod:`vertex.rules` (through :mod:`job_spec`), the
plan parsed (:mod:`plans`). The pydantic models, rules and plans load inside the functions,
when an operator is built or a task runs, so importing this module at DAG parse is cheap.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
from airflow_gpu_sched.orchestration.ledger import MANAGED_LABEL, MANAGED_VALUE, SUBMISSION_LABEL
from airflow_gpu_sched.orchestration.orphans import label_value  # one rule: the orphan matching reads labels with it

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration.job_types import JobOptions
    from airflow_gpu_sched.orchestration.plans import Step
    from airflow_gpu_sched.vertex.models import CustomJob
    from airflow_gpu_sched.vertex.rules import Violation

JOB_ARGS = ("project_id", "location", "display_name", "worker_pool_specs", "job_spec", "image_uri", "command",
            "args", "env", "machine_type", "accelerator_type", "accelerator_count", "replica_count",
            "base_output_dir", "labels", "timeout", "service_account")
JOB_TYPE_ARGS = ("job_type", "study_spec", "max_trial_count", "parallel_trial_count", "max_failed_trial_count",
                 "model_display_name", "model_serving_image_uri", "parent_model")
PLAN_ARGS = ("plan", "fallback", "hardware", "regions_first", "deadline", "expected_run_time", "prices", "budget", "run_budget",
             "quota_preflight", "retry_on_user_code_failure", "resubmit_on", "max_failure_resubmits",
             "plan_objective")
CONNECTION_ARGS = ("gcp_conn_id", "impersonation_chain", "deferrable", "poll_interval", "transient_error_window")
OBSERVABILITY_ARGS = ("on_capacity_acquired", "on_preempted", "on_fallback", "stream_logs", "log_lines_per_minute",
                      "failure_log_lines")
# The operator's arguments, as its docstring shows them (operators/base.py appends this).
PARAMETERS = """
    :param project_id: Google Cloud project of the job.
    :param location: region, e.g. ``us-central1`` (a step's ``locations`` override it).
    :param display_name: the job's name in Vertex AI (default ``<dag_id>-<task_id>``).
    :param worker_pool_specs: the pools, as REST JSON dicts (as in the Vertex docs) or models;
        or use the one-pool shorthand ``image_uri``, ``command``, ``args``, ``env``,
        ``machine_type``, ``accelerator_type``, ``accelerator_count``, ``replica_count``.
    :param job_spec: the whole CustomJob body, REST JSON as ``customJobs.create`` takes it
        (``{"displayName": ..., "labels": ..., "encryptionSpec": ..., "jobSpec": {...}}``; a bare
        CustomJobSpec, as ``gcloud ai custom-jobs create --config`` reads, is taken as its
        ``jobSpec``), inline or as a ``.json``/``.yaml``/``.yml`` template file. It carries what the
        arguments do not (network, encryptionSpec, tensorboard, enableWebAccess, experiment,
        reservationAffinity, scheduling.restartJobOnWorkerRestart/disableRetries, ...); the
        operator's arguments and the plan's step are merged over it (the step's strategy, wait and
        persistent resource win; labels merged). Checked against Google's schema before any call:
        an unknown field or a wrong type fails with :class:`InvalidTrainingSpec` naming its path.
    :param base_output_dir: ``gs://`` prefix -> ``baseOutputDirectory``; Vertex sets
        ``AIP_CHECKPOINT_DIR=<dir>/checkpoints/`` in every worker, and every attempt of the task
        (every step and region of its plan) gets the same one, so a job resumes from the
        checkpoints an earlier attempt left.
    :param labels: job labels (the operator adds ``managed-by``, the submission key and the
        DAG/task/run ids and the try number).
    :param timeout: the job's run-time limit (timedelta, seconds, ``"2h"``, ``"1800s"``).
    :param service_account: the job's service account.
    :param job_type: what is submitted with that spec: ``"custom_job"`` (default),
        ``"hyperparameter_tuning_job"`` (trials are custom jobs of the spec; give ``study_spec``,
        ``max_trial_count``, ``parallel_trial_count``, ``max_failed_trial_count``; the result adds
        ``trials`` and ``best_trial``) or ``"training_pipeline"`` (the spec runs as a custom-task
        pipeline that registers a model; give ``model_display_name``, ``model_serving_image_uri``
        and optionally ``parent_model``; the result adds ``model_name`` and ``model_version``).
        Strategies, waits, recovery, idempotency, cancellation and accounting are the same.
    :param quota_preflight: before submitting, read the region's GPU quota for the step's tier
        (preemptible for FLEX_START and SPOT, on-demand for STANDARD) from the Cloud Quotas API
        and fail (or, in a plan, skip the step) when the job needs more; an unreadable quota only
        warns. ``False`` turns it off.
    :param gcp_conn_id: Airflow connection (``google_cloud_platform`` or ``vertex_gpu_sched`` type; extra
        ``api_endpoint`` points at another root, e.g. the emulator).
    :param impersonation_chain: a service account to impersonate with short-lived credentials,
        or a list whose last account is impersonated through the ones before it (each holds
        Token Creator on the next), as in the Google provider's operators; wins over the
        connection's ``impersonation_chain``. The triggers use it too.
    :param deferrable: wait in the triggerer (True) or poll in the worker (False); default
        ``[operators] default_deferrable`` of the Airflow config (False unless set), as Airflow's
        own operators.
    :param poll_interval: seconds between polls.
    :param transient_error_window: seconds of failing API calls (5xx, 429, network) tolerated
        before the task fails with :class:`VertexUnreachable`.
    :param retry_on_user_code_failure: let an Airflow retry submit a new job after the job
        failed for its code (or its ``timeout``): ``TrainingJobFailed``. Default False: the task
        fails at once with ``TrainingJobFailedNoRetry`` (an ``AirflowFailException``), whatever
        its ``retries``, since a failed run of many GPUs for hours is the cost of repeating it;
        capacity, quota and API outcomes are retried either way (docs/operators.md, "Retries").
    :param max_failure_resubmits, resubmit_on: resubmit a job that FAILED with a hardware-shaped error (NCCL
        timeout, uncorrectable ECC, Xid; exit codes, regexes) from the same checkpoints, at most this many times a
        run (default 0: never); anything else stays the user's failure (docs/resubmit.md).
    :param fallback: steps tried after this operator's own when capacity does not come.
    :param hardware: alternatives tried in order, each bounded by its step's ``capacity_wait_timeout``:
        ``[{"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8,
        "replica_count": 1}, ...]`` (``replica_count``: machines in all); every step that names no
        ``hardware`` of its own takes them. The job's pools are rewritten for each, and the job
        reads the one it got from ``GPU_SCHED_HARDWARE`` (docs/plans.md, "Hardware alternatives").
    :param regions_first: on a capacity outcome try the step's next region before the next step
        (default), or every step in one region before the next region.
    :param deadline: bounds the whole plan: an absolute datetime, or a timedelta after the data
        interval's end. Steps that can no longer finish (``expected_run_time``) are skipped, a
        FLEX_START wait is clipped to the time left; past it the task fails with
        :class:`DeadlineExceeded`.
    :param expected_run_time: how long the job runs once it has its GPUs (for the deadline).
    :param plan_objective: ``"cost"`` / ``"time"``: steps without their own ``region_order`` order theirs
        cheapest / observed (docs/cost.md).
    :param prices: cost per GPU-hour, ``{"currency": "USD", "NVIDIA_H100_80GB": {"SPOT": 2.5,
        "FLEX_START": 4.0, ...}}``, or the name of an Airflow Variable holding that JSON, or
        ``"catalog"`` / ``"catalog:<Variable>"``: Google's billing catalog, that table for what it lacks (docs/cost.md).
    :param budget: at most this much (price table's currency) on this task's jobs: a step whose
        expected cost is over what is left is skipped; none fits: :class:`BudgetExceeded` (docs/cost.md).
    :param run_budget: ``RunBudget(name, limit)`` (or that as a dict): a budget shared by the DAG
        run's tasks that name it; this task reserves its ``budget=`` (else its dearest step) of it.
    :param on_capacity_acquired, on_preempted, on_fallback: callables (or Airflow notifiers)
        handed the attempt record when a job got its GPUs, was preempted, or the plan moved on.
    :param stream_logs: while the job runs, write its Cloud Logging lines (what the training
        code prints, per replica, with severity) into the task log; resumes after a triggerer
        restart without repeating or dropping a line (:mod:`airflow_gpu_sched.triggers.log_tail`).
    :param log_lines_per_minute: at most this many job log lines a minute in the task log (the
        rest are counted and said skipped; ``None``: no cap).
    :param failure_log_lines: when the job FAILED, its failing replica's last this-many log lines
        go into the task log and the error's message (0: none).
"""
# stored as given (the rest are parsed, or turned into what the run uses, by store())
_AS_GIVEN = ("project_id", "location", "display_name", "worker_pool_specs", "job_spec", "image_uri", "command",
             "args", "env", "machine_type", "accelerator_type", "accelerator_count", "replica_count",
             "base_output_dir", "labels", "service_account")
_AS_GIVEN_AFTER_TYPE = ("study_spec", "max_trial_count", "parallel_trial_count", "max_failed_trial_count",
                        "model_display_name", "model_serving_image_uri", "parent_model", "quota_preflight",
                        "gcp_conn_id", "impersonation_chain", "deferrable")


def what(op: Any) -> str:
    """How an error names the task: ``SpotTrainingOperator 'train'``."""
    return f"{type(op).__name__} {op.task_id!r}"


def store(op: Any, given: dict[str, Any]) -> None:
    """The operator's arguments (``given``: every group's, by name) onto ``op``: literals parsed
    now, a template kept as its text until rendered; the plan parsed, its templated values later."""
    from airflow_gpu_sched.orchestration.job_types import get_job_type
    from airflow_gpu_sched.vertex.rules import Violation

    for name in _AS_GIVEN:
        setattr(op, name, given[name])
    try:
        op.job_kind = get_job_type(given["job_type"])
    except ValueError as exc:
        raise InvalidTrainingSpec([Violation("job_type", str(exc))]) from None
    op.job_type = given["job_type"]
    for name in _AS_GIVEN_AFTER_TYPE:
        setattr(op, name, given[name])
    op.transient_error_window = float(given["transient_error_window"])
    op.regions_first = given["regions_first"]
    op.hardware = given.get("hardware")  # every step's alternatives unless it names its own (orchestration/hardware.py)
    # literal: parsed now; a template: its text until rendered (orchestration/templated_args.py)
    set_scalars(op, {name: given[name] for name in ("timeout", "deadline", "expected_run_time", "poll_interval",
                                                    "prices")}, keep_templates=True)
    op.budget = given["budget"]  # orchestration/budget.py: checked with the other arguments (violations)
    op.run_budget = given["run_budget"]  # a RunBudget shared by the DAG run's tasks (orchestration/run_budget.py)
    op.plan_objective = given["plan_objective"]  # operators/region_order.py (checked with the other arguments)
    for name in ("on_capacity_acquired", "on_preempted", "on_fallback"):
        setattr(op, name, given[name])
    op.retry_on_user_code_failure = bool(given["retry_on_user_code_failure"])
    op.resubmit_on, op.max_failure_resubmits = given["resubmit_on"], given["max_failure_resubmits"]
    op.resubmit = resubmit_policy(op.resubmit_on, op.max_failure_resubmits)  # checked now: a clear error
    op.stream_logs = bool(given["stream_logs"])
    op.log_lines_per_minute = count_limit("log_lines_per_minute", given["log_lines_per_minute"], allow_none=True)
    op.failure_log_lines = count_limit("failure_log_lines", given["failure_log_lines"])
    plan, fallback = given["plan"], given["fallback"]
    if isinstance(plan, str):  # JSON/YAML text, a .json/.yaml file, or a template of the whole plan
        from airflow_gpu_sched.orchestration.structured_render import plan_from_text

        if fallback:
            raise InvalidTrainingSpec([Violation("fallback", "not with a plan given as text: put every "
                                                             "step in the plan")])
        op.plan_spec = plan_from_text(plan)
    else:
        op.plan_spec = [*(plan if plan is not None else op.own_steps()), *(fallback or [])]
    op.plan = parse_plan(op, ignore_templates=True)


def resubmit_policy(resubmit_on: Any, max_failure_resubmits: Any) -> Any:
    """The hardware-failure resubmit policy (orchestration/resubmit.py); a bad one names its field."""
    from airflow_gpu_sched.orchestration.resubmit import ResubmitSpecError, policy
    from airflow_gpu_sched.vertex.rules import Violation

    try:
        return policy(resubmit_on, max_failure_resubmits)
    except ResubmitSpecError as exc:
        field, _, rule = str(exc).partition(": ")
        raise InvalidTrainingSpec([Violation(field, rule)]) from None


def set_scalars(op: Any, values: dict[str, Any], keep_templates: bool) -> None:
    from airflow_gpu_sched.orchestration.templated_args import apply

    apply(op, values, keep_templates, what(op))


def parse_plan(op: Any, ignore_templates: bool) -> list[Step]:
    from airflow_gpu_sched.orchestration.plans import PlanError, parse_plan as parse

    if isinstance(op.plan_spec, str) and ignore_templates:
        return []  # a file or a template of the whole plan: parsed once read or rendered
    try:
        return parse(op.plan_spec, ignore_templates=ignore_templates, hardware=getattr(op, "hardware", None))
    except PlanError as exc:
        raise InvalidTrainingSpec(exc.violations, f"plan of {op.task_id!r}") from None


def positions(op: Any) -> list[tuple[int, str]]:
    from airflow_gpu_sched.orchestration.plans import positions as of

    return of(op.plan, op.location, op.regions_first)


# ---------------------------------------------------------------------------------------- the job


def build_job(op: Any, extra_labels: dict[str, str] | None = None, step: Step | None = None,
              max_wait: timedelta | None = None) -> CustomJob:
    from airflow_gpu_sched.orchestration import job_spec

    step = step or op.plan[0]
    given = job_spec.parse_given_job(op.job_spec)
    shorthand = op.image_uri is not None or op.machine_type is not None
    pools = job_spec.worker_pools(
        op.worker_pool_specs if op.worker_pool_specs is not None or shorthand
        else job_spec.given_pools(given), image_uri=op.image_uri, command=op.command, args=op.args,
        env=op.env, machine_type=op.machine_type, accelerator_type=op.accelerator_type,
        accelerator_count=count_arg("accelerator_count", op.accelerator_count),
        replica_count=count_arg("replica_count", op.replica_count))
    labels = {**(op.labels or {}), **(extra_labels or {})}
    if step.hardware:  # this position's hardware alternative (orchestration/hardware.py)
        from airflow_gpu_sched.orchestration.hardware import rewrite_pools

        pools = rewrite_pools(pools, step.hardware[0])
    pools = job_spec.with_machine_spec(pools, getattr(step, "machine_spec_extra", dict)())  # RESERVATION
    return job_spec.build_custom_job(
        display_name=op.display_name or f"{op.dag_id}-{op.task_id}",
        pools=pools, scheduling=step.scheduling(op.timeout, max_wait), labels=labels,
        base_output_dir=op.base_output_dir, service_account=op.service_account,
        persistent_resource_id=step.resource_id, given=given, own_display_name=op.display_name is not None)


def job_options(op: Any) -> JobOptions:
    from airflow_gpu_sched.orchestration import job_spec
    from airflow_gpu_sched.orchestration.job_types import JobOptions

    study_spec = op.study_spec
    if isinstance(study_spec, str) and not job_spec.has_template(study_spec):
        study_spec = json_arg("study_spec", study_spec)  # a template that rendered to JSON text
    return JobOptions.of(study_spec=study_spec, max_trial_count=op.max_trial_count,
                         parallel_trial_count=op.parallel_trial_count,
                         max_failed_trial_count=op.max_failed_trial_count,
                         model_display_name=op.model_display_name,
                         model_serving_image_uri=op.model_serving_image_uri, parent_model=op.parent_model)


def violations(op: Any, ignore_templates: bool) -> list[Violation]:
    """Every step's rules: a spec one step cannot take is an error before anything runs."""
    from airflow_gpu_sched.orchestration import job_spec
    from airflow_gpu_sched.orchestration.budget import check_budget_args
    from airflow_gpu_sched.orchestration.cheapest import check_objective
    from airflow_gpu_sched.orchestration.plans import check_regions
    from airflow_gpu_sched.vertex.rules import Violation

    found = op.job_kind.violations(job_options(op))
    found += check_regions(op.plan, op.location)
    found += [Violation(*rule.split(": ", 1))
              for rule in check_budget_args(op.budget, op.expected_run_time, op.run_budget)
              + check_objective(op.plan_objective)]
    if ignore_templates:  # an argument that is still a Jinja template is checked once rendered
        found = [v for v in found if not job_spec.has_template(getattr(op, argument(v.path), None))]
    from airflow_gpu_sched.orchestration.hardware import given_index, name_violations

    for expanded, planned in enumerate(op.plan):
        index = given_index(op.plan, expanded)  # as the plan was given (a step of N alternatives: N here)
        members = getattr(planned, "members", None)  # a race: each member's rules
        for member, step in enumerate(members or (planned,)):
            prefix = (f"plan[{index}].race[{member}] {step.strategy}: " if members else
                      f"plan[{index}] {step.strategy}: " if len(op.plan) > 1 else "")
            rules = job_spec.violations(build_job(op, step=step), ignore_templates=ignore_templates)
            found += [Violation(v.path, prefix + v.rule) for v in name_violations(rules, step.hardware_origin)]
    return list(dict.fromkeys(found))


def check_at_parse_time(op: Any) -> None:
    """What can be checked when the DAG file is parsed (a template's value: once rendered)."""
    from airflow_gpu_sched.orchestration import job_spec

    if isinstance(op.plan_spec, str):
        return  # the plan is a file or a template: checked once read or rendered, before any call
    if isinstance(op.worker_pool_specs, str) and job_spec.has_template(op.worker_pool_specs):
        return  # all of it is a template: checked after rendering
    if isinstance(op.job_spec, str):
        return  # a template file: checked once rendered, before any call
    if job_spec.has_template(op.job_spec):
        # templated values are checked once rendered; a field name is never a template
        found = [v for v in job_spec.schema_violations(job_spec.parse_given_job(op.job_spec))
                 if "Unknown name" in v.rule]
        if found:
            raise InvalidTrainingSpec(found, what(op))
        return
    from airflow_gpu_sched.orchestration.templated_args import standing_in

    with standing_in(op):  # a templated scalar is checked once rendered; the rest of the job now
        found = violations(op, ignore_templates=True)
    if found:
        raise InvalidTrainingSpec(found, what(op))


def labels(op: Any, context: Any, submission_key: str | None) -> dict[str, str]:
    """The labels the operator adds: managed-by, the deployment, the DAG/task/run/map index/try, the
    submission key."""
    ti = context.get("ti")
    from airflow_gpu_sched.orchestration import deployment

    extra = {MANAGED_LABEL: MANAGED_VALUE, deployment.DEPLOYMENT_LABEL: deployment.current(),  # whose job
             "airflow-dag": label_value(op.dag_id), "airflow-task": label_value(op.task_id)}
    if ti is not None and getattr(ti, "map_index", -1) not in (-1, None):
        extra["airflow-map-index"] = str(ti.map_index)
    if ti is not None and getattr(ti, "run_id", None):  # which run owns the job (`jobs orphans`)
        extra["airflow-run"] = label_value(ti.run_id)
    if ti is not None and isinstance(getattr(ti, "try_number", None), int):
        extra["airflow-try"] = str(ti.try_number)  # the try that submitted it (`jobs list`)
    if submission_key:
        extra[SUBMISSION_LABEL] = submission_key
    return extra


def validated_job(op: Any, context: Any, submission_key: str | None = None, step: Step | None = None,
                  max_wait: timedelta | None = None) -> CustomJob:
    """The job as it will be submitted (rendered), checked against every rule."""
    from airflow_gpu_sched.orchestration import job_spec

    if step is None:  # before anything runs: every step of the plan
        found = violations(op, ignore_templates=False)
        if found:
            raise InvalidTrainingSpec(found, what(op))
    job = build_job(op, labels(op, context, submission_key), step, max_wait)
    found = job_spec.violations(job)
    if found:
        raise InvalidTrainingSpec(found, what(op))
    return job


# ---------------------------------------------------------------------------------------- arguments




def argument(path: str) -> str:
    """``study_spec.metrics[0].goal`` -> ``study_spec``: the operator argument a violation is about."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def json_arg(name: str, text: str) -> Any:
    import json

    from airflow_gpu_sched.vertex.rules import Violation

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidTrainingSpec([Violation(name, f"must be a JSON object once rendered ({exc})")]) from None


def count_arg(name: str, value: Any) -> int | None:
    """A count as given, or as a template renders it (text); None while still a template."""
    from airflow_gpu_sched.orchestration import job_spec
    from airflow_gpu_sched.vertex.rules import Violation

    if not isinstance(value, str):
        return value
    if job_spec.has_template(value):
        return None  # checked once rendered
    if not value.strip().isdigit():
        raise InvalidTrainingSpec([Violation(name, f"must be a whole number once rendered (got {value!r})")])
    return int(value)


def count_limit(name: str, value: Any, allow_none: bool = False) -> int | None:
    from airflow_gpu_sched.vertex.rules import Violation

    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        rule = "a whole number >= 0" + (" or None" if allow_none else "")
        raise InvalidTrainingSpec([Violation(name, f"must be {rule} (got {value!r})")])
    return value


def step_duration_arg(name: str, value: Any) -> timedelta | str | None:
    """A preset operator's duration for its own step: parsed now, or a template's text that the
    step's value renders (``plan_spec``) and the plan's parse checks, naming ``plan[0].<name>``."""
    from airflow_gpu_sched.orchestration.templated_args import duration, has_template

    return value if has_template(value) else duration(name, value)
