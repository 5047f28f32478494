"""The one base of the training operators: validate -> loop(decide, act) -> result.

Orchestration only: every decision of the capacity plan is :func:`plan_engine.decide`'s
(pure); this operator carries its actions out (client calls, ledger writes, deferral, logs,
callbacks, XCom) and feeds what came of them back as the next event. The job is built and
checked in :mod:`job_spec` (rules in :mod:`rules`), submissions are remembered in
:mod:`ledger`, waiting is done by :mod:`triggers` (in the triggerer when ``deferrable``, else
by running the same trigger loop in the worker), a finished job is classified in
:mod:`outcomes`, and figures come from :mod:`accounting`. Subclasses add their strategy's
arguments and their own first step (:meth:`own_steps`).

Imports of the clients (requests, google-auth, httpx) and of :mod:`plan_engine` (two dozen
dataclasses) happen only when a task runs, so importing the operators at DAG-parse time stays
cheap.

May import: vertex, orchestration, triggers, operators; airflow.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf  # already loaded by airflow.sdk: costs nothing at DAG parse

from airflow_gpu_sched.operators import lineage, observe, region_order, run, vertex_calls
from airflow_gpu_sched.operators.run import ERRORS  # noqa: F401 (importable here, as before)
from airflow_gpu_sched.operators.links import LINKS, ConsoleLink
from airflow_gpu_sched.operators.running import first_event
from airflow_gpu_sched.operators.running import now as _now
from airflow_gpu_sched.operators.running import try_number as _try_number
from airflow_gpu_sched.orchestration import assets
from airflow_gpu_sched.orchestration.errors import (
    DeadlineExceeded,
    InvalidTrainingSpec,
    TrainingJobFailed,
    TrainingJobFailedNoRetry,
    VertexUnreachable,
)
from airflow_gpu_sched.orchestration.ledger import MANAGED_LABEL, MANAGED_VALUE, SUBMISSION_LABEL, SubmissionLedger
from airflow_gpu_sched.orchestration.orphans import label_value
from airflow_gpu_sched.vertex.defaults import TRANSIENT_ERROR_WINDOW

if TYPE_CHECKING:  # the pydantic models, rules and job types load when a task runs, not at DAG parse
    from airflow.sdk import Context

    from airflow_gpu_sched.orchestration.job_types import JobOptions, JobType
    from airflow_gpu_sched.orchestration.plans import Step
    from airflow_gpu_sched.vertex.models import CustomJob
    from airflow_gpu_sched.vertex.rules import Violation

    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow.triggers.base import BaseTrigger

STRUCTURED = ("job_spec", "worker_pool_specs", "plan_spec")  # parsed, then rendered value by value (_render_structured)


class VertexCustomJobLink(ConsoleLink):
    """Extra link "Vertex AI Custom Job": the console page of the task's latest custom job (the
    other job types, the resource, model and logs: :mod:`airflow_gpu_sched.operators.links`).
    Defined here: its class path is the one serialized DAGs and the provider info name."""

    name = "Vertex AI Custom Job"
    key = "custom_job"


def _label_value(text: str) -> str:
    """Any text as a valid label value (one rule: the orphan matching reads labels with it too)."""
    return label_value(text)


class VertexTrainingOperator(BaseOperator):
    """Train on Vertex AI under a capacity plan: an ordered list of steps (strategies), each
    with its own knobs and regions (:mod:`airflow_gpu_sched.orchestration.plans`).

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
    :param fallback: steps tried after this operator's own when capacity does not come.
    :param regions_first: on a capacity outcome try the step's next region before the next step
        (default), or every step in one region before the next region.
    :param deadline: bounds the whole plan: an absolute datetime, or a timedelta after the data
        interval's end. Steps that can no longer finish (``expected_run_time``) are skipped, a
        FLEX_START wait is clipped to the time left; past it the task fails with
        :class:`DeadlineExceeded`.
    :param expected_run_time: how long the job runs once it has its GPUs (for the deadline).
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

    # Everything a user would template; the plan's steps through ``plan_spec`` (the raw steps,
    # parsed again once rendered: see render_template_fields).
    template_fields = ("project_id", "location", "display_name", "worker_pool_specs", "image_uri", "command",
                       "args", "env", "machine_type", "accelerator_type", "accelerator_count", "replica_count",
                       "base_output_dir", "labels", "service_account", "study_spec", "model_display_name",
                       "parent_model", "gcp_conn_id", "impersonation_chain", "plan_spec", "job_spec",
                       "timeout", "deadline", "expected_run_time", "poll_interval", "prices")
    # job_spec="train.yaml": Airflow renders a file of these endings (DAG folder /
    # template_searchpath) into its text, parsed as JSON or YAML once rendered
    template_ext = (".json", ".yaml", ".yml")
    template_fields_renderers = {"worker_pool_specs": "json", "env": "json", "labels": "json", "study_spec": "json",
                                 "plan_spec": "json", "job_spec": "json"}
    operator_extra_links = (VertexCustomJobLink(), *LINKS)
    ui_color = "#c9e4ff"

    def __init__(
        self,
        *,
        project_id: str,
        location: str,
        display_name: str | None = None,
        worker_pool_specs: Any = None,
        job_spec: dict[str, Any] | str | None = None,
        image_uri: str | None = None,
        command: list[str] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        machine_type: str | None = None,
        accelerator_type: str | None = None,
        accelerator_count: int | None = None,
        replica_count: int | None = None,
        base_output_dir: str | None = None,
        labels: dict[str, str] | None = None,
        timeout: timedelta | float | str | None = None,
        service_account: str | None = None,
        job_type: str = "custom_job",
        study_spec: Any = None,
        max_trial_count: int | None = None,
        parallel_trial_count: int | None = None,
        max_failed_trial_count: int | None = None,
        model_display_name: str | None = None,
        model_serving_image_uri: str | None = None,
        parent_model: str | None = None,
        quota_preflight: bool = True,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | list[str] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 30.0,
        transient_error_window: float = TRANSIENT_ERROR_WINDOW,
        plan: list[Step | dict[str, Any]] | None = None,
        fallback: list[Step | dict[str, Any]] | None = None,
        regions_first: bool = True,
        deadline: datetime | timedelta | None = None,
        expected_run_time: timedelta | float | str | None = None,
        prices: dict[str, Any] | str | None = None,
        budget: float | None = None,
        run_budget: Any = None,
        on_capacity_acquired: Any = None,
        on_preempted: Any = None,
        on_fallback: Any = None,
        retry_on_user_code_failure: bool = False,
        stream_logs: bool = True,
        log_lines_per_minute: int | None = 600,
        failure_log_lines: int = 50,
        **kwargs: Any,
    ) -> None:
        from airflow_gpu_sched.orchestration.job_types import get_job_type
        from airflow_gpu_sched.vertex.rules import Violation
        if kwargs.get("outlets") is None:  # none declared: the output dir's and the model's Assets
            kwargs["outlets"] = assets.default_outlets(project_id, location, job_type, base_output_dir,
                                                       model_display_name)
        super().__init__(**kwargs)
        self.project_id = project_id
        self.location = location
        self.display_name = display_name
        self.worker_pool_specs = worker_pool_specs
        self.job_spec = job_spec
        self.image_uri = image_uri
        self.command = command
        self.args = args
        self.env = env
        self.machine_type = machine_type
        self.accelerator_type = accelerator_type
        self.accelerator_count = accelerator_count
        self.replica_count = replica_count
        self.base_output_dir = base_output_dir
        self.labels = labels
        self.service_account = service_account
        try:
            self.job_kind = get_job_type(job_type)
        except ValueError as exc:
            raise InvalidTrainingSpec([Violation("job_type", str(exc))]) from None
        self.job_type = job_type
        self.study_spec = study_spec
        self.max_trial_count = max_trial_count
        self.parallel_trial_count = parallel_trial_count
        self.max_failed_trial_count = max_failed_trial_count
        self.model_display_name = model_display_name
        self.model_serving_image_uri = model_serving_image_uri
        self.parent_model = parent_model
        self.quota_preflight = quota_preflight
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.deferrable = deferrable
        self.transient_error_window = float(transient_error_window)
        self.regions_first = regions_first
        # literal: parsed now; a template: its text until rendered (orchestration/templated_args.py)
        self._set_scalars(dict(timeout=timeout, deadline=deadline, expected_run_time=expected_run_time,
                               poll_interval=poll_interval, prices=prices), keep_templates=True)
        self.budget = budget  # orchestration/budget.py: checked with the other arguments below
        self.run_budget = run_budget  # a RunBudget shared by the DAG run's tasks (orchestration/run_budget.py)
        self.on_capacity_acquired = on_capacity_acquired
        self.on_preempted = on_preempted
        self.on_fallback = on_fallback
        self.retry_on_user_code_failure = bool(retry_on_user_code_failure)
        self.stream_logs = bool(stream_logs)
        self.log_lines_per_minute = _count_limit("log_lines_per_minute", log_lines_per_minute, allow_none=True)
        self.failure_log_lines = _count_limit("failure_log_lines", failure_log_lines)
        if isinstance(plan, str):  # JSON/YAML text, a .json/.yaml file, or a template of the whole plan
            from airflow_gpu_sched.orchestration.structured_render import plan_from_text

            if fallback:
                raise InvalidTrainingSpec([Violation("fallback", "not with a plan given as text: put every "
                                                                 "step in the plan")])
            self.plan_spec: Any = plan_from_text(plan)
        else:
            self.plan_spec = [*(plan if plan is not None else self.own_steps()), *(fallback or [])]
        self.plan = self._parse_plan(ignore_templates=True)
        self._job_name: str | None = None  # the job on_kill cancels (sync mode)
        self._ledger: SubmissionLedger | None = None  # the running loop's
        self._race_jobs: list[str] = []  # a race's members on_kill cancels (sync mode)
        self._check_at_parse_time()

    def _set_scalars(self, values: dict[str, Any], keep_templates: bool) -> None:
        from airflow_gpu_sched.orchestration.templated_args import apply

        apply(self, values, keep_templates, f"{type(self).__name__} {self.task_id!r}")

    def _parse_plan(self, ignore_templates: bool) -> list[Step]:
        from airflow_gpu_sched.orchestration.plans import PlanError, parse_plan
        if isinstance(self.plan_spec, str) and ignore_templates:
            return []  # a file or a template of the whole plan: parsed once read or rendered
        try:
            return parse_plan(self.plan_spec, ignore_templates=ignore_templates)
        except PlanError as exc:
            raise InvalidTrainingSpec(exc.violations, f"plan of {self.task_id!r}") from None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render, then parse the rendered plan: a templated step value is checked here, before
        any call (a literal one was checked when the DAG was parsed)."""
        # template_ext applies to no string value: an argument such as args=["--config=c.yaml"]
        # stays text instead of being read as a template file (job_spec's file is read below)
        jinja_env = jinja_env or self.get_template_env()
        self.template_ext = ()
        try:
            self._render_structured(context, jinja_env)
            self._do_render_template_fields(self, [f for f in self.template_fields if f not in STRUCTURED], context,
                                            jinja_env, set())
        finally:
            del self.template_ext  # back to the class's
        self.plan = self._parse_plan(ignore_templates=False)
        from airflow_gpu_sched.orchestration.templated_args import TEMPLATED_SCALARS

        self._set_scalars({name: getattr(self, name) for name in TEMPLATED_SCALARS}, keep_templates=False)

    def _render_structured(self, context: Any, jinja_env: Any) -> None:
        """job_spec and worker_pool_specs: parsed first, then each string value rendered, so a
        rendered value cannot change the job's structure (:mod:`orchestration.structured_render`)."""
        from airflow_gpu_sched.orchestration import structured_render

        def render(text: str) -> Any:
            return self.render_template(text, context, jinja_env, set())

        def read_file(path: str) -> str:
            return jinja_env.loader.get_source(jinja_env, path)[0]

        self.job_spec = structured_render.render_job_spec(self.job_spec, render, read_file)
        self.plan_spec = structured_render.render_plan(self.plan_spec, render, read_file)
        self.worker_pool_specs = structured_render.render_worker_pool_specs(self.worker_pool_specs, render)

    def resolve_template_files(self) -> None:
        """At DAG parse, read job_spec's file (only job_spec's: see render_template_fields)."""
        if isinstance(self.job_spec, str) and self.job_spec.endswith(tuple(self.template_ext)):
            env = self.get_template_env()
            try:
                self.job_spec = env.loader.get_source(env, self.job_spec)[0]
            except Exception:  # not found from here: rendering reads it (or names the error)
                self.log.debug("job_spec file %s not resolved at parse time", self.job_spec)
        if isinstance(self.plan_spec, str) and self.plan_spec.strip().endswith(tuple(self.template_ext)):
            from airflow_gpu_sched.orchestration.structured_render import plan_from_text

            env = self.get_template_env()
            try:
                text = env.loader.get_source(env, self.plan_spec.strip())[0]
            except Exception:  # not found from here: rendering reads it (or names the error)
                self.log.debug("plan file %s not resolved at parse time", self.plan_spec)
            else:
                self.plan_spec = plan_from_text(text)
                self.plan = self._parse_plan(ignore_templates=True)
        self.prepare_template()

    def own_steps(self) -> list[Step]:
        """The preset operators' own step (GpuTrainingOperator takes ``plan=`` instead)."""
        from airflow_gpu_sched.vertex.rules import Violation
        raise InvalidTrainingSpec([Violation("plan", "give plan=[...] steps")])

    # ------------------------------------------------------------------ the plan

    def positions(self) -> list[tuple[int, str]]:
        from airflow_gpu_sched.orchestration.plans import positions
        return positions(self.plan, self.location, self.regions_first)

    def engine_plan(self, context: Context, ledger: SubmissionLedger) -> engine.Plan:
        from airflow_gpu_sched.orchestration import plan_engine as engine
        from airflow_gpu_sched.orchestration.budget import budget_for

        return engine.Plan.of(self.plan, self.location, self.regions_first, project=self.project_id,
                       deadline=self._deadline(context, ledger), expected_run_time=self.expected_run_time,
                       quota_preflight=self.quota_preflight, checkpoints=self.base_output_dir,
                       retry_on_user_code_failure=self.retry_on_user_code_failure,
                       budget=budget_for(self, ledger, context))

    def _deadline(self, context: Context, ledger: SubmissionLedger) -> datetime | None:
        """The plan's deadline. A timedelta counts from the data interval's end; in a manual
        run (``airflow dags test``, a trigger from the UI) whose interval ended long ago, it
        counts from when the task first started instead (kept in the ledger across tries)."""
        if self.deadline is None:
            return None
        if isinstance(self.deadline, datetime):
            return self.deadline if self.deadline.tzinfo else self.deadline.replace(tzinfo=timezone.utc)
        anchor = context.get("data_interval_end") or context.get("logical_date")
        dag_run = context.get("dag_run")
        if anchor is None or str(getattr(dag_run, "run_type", "")).lower().endswith("manual"):
            if not ledger.data.get("started_at"):
                ledger.data["started_at"] = _now().isoformat()
                ledger.save()
            anchor = datetime.fromisoformat(ledger.data["started_at"])
        return anchor + self.deadline

    # ------------------------------------------------------------------ the job

    def build_job(self, extra_labels: dict[str, str] | None = None, step: Step | None = None,
                  max_wait: timedelta | None = None) -> CustomJob:
        from airflow_gpu_sched.orchestration import job_spec
        step = step or self.plan[0]
        given = job_spec.parse_given_job(self.job_spec)
        pools = job_spec.worker_pools(
            self.worker_pool_specs if self.worker_pool_specs is not None or self._shorthand_given()
            else job_spec.given_pools(given), image_uri=self.image_uri, command=self.command, args=self.args,
            env=self.env, machine_type=self.machine_type, accelerator_type=self.accelerator_type,
            accelerator_count=_count_arg("accelerator_count", self.accelerator_count),
            replica_count=_count_arg("replica_count", self.replica_count))
        labels = {**(self.labels or {}), **(extra_labels or {})}
        pools = job_spec.with_machine_spec(pools, getattr(step, "machine_spec_extra", dict)())  # RESERVATION
        return job_spec.build_custom_job(
            display_name=self.display_name or f"{self.dag_id}-{self.task_id}",
            pools=pools, scheduling=step.scheduling(self.timeout, max_wait), labels=labels,
            base_output_dir=self.base_output_dir, service_account=self.service_account,
            persistent_resource_id=step.resource_id, given=given, own_display_name=self.display_name is not None)

    def _shorthand_given(self) -> bool:
        return self.image_uri is not None or self.machine_type is not None

    def job_options(self) -> JobOptions:
        from airflow_gpu_sched.orchestration import job_spec
        from airflow_gpu_sched.orchestration.job_types import JobOptions
        study_spec = self.study_spec
        if isinstance(study_spec, str) and not job_spec.has_template(study_spec):
            study_spec = _json_arg("study_spec", study_spec)  # a template that rendered to JSON text
        return JobOptions.of(study_spec=study_spec, max_trial_count=self.max_trial_count,
                             parallel_trial_count=self.parallel_trial_count,
                             max_failed_trial_count=self.max_failed_trial_count,
                             model_display_name=self.model_display_name,
                             model_serving_image_uri=self.model_serving_image_uri, parent_model=self.parent_model)

    def _violations(self, ignore_templates: bool) -> list[Violation]:
        """Every step's rules: a spec one step cannot take is an error before anything runs."""
        from airflow_gpu_sched.orchestration import job_spec
        from airflow_gpu_sched.orchestration.budget import check_budget_args
        from airflow_gpu_sched.orchestration.plans import check_regions
        from airflow_gpu_sched.vertex.rules import Violation
        found = self.job_kind.violations(self.job_options())
        found += check_regions(self.plan, self.location)
        found += [Violation(*rule.split(": ", 1))
                  for rule in check_budget_args(self.budget, self.expected_run_time, self.run_budget)]
        if ignore_templates:  # an argument that is still a Jinja template is checked once rendered
            found = [v for v in found if not job_spec.has_template(getattr(self, _argument(v.path), None))]
        for index, planned in enumerate(self.plan):
            members = getattr(planned, "members", None)  # a race: each member's rules
            for member, step in enumerate(members or (planned,)):
                prefix = (f"plan[{index}].race[{member}] {step.strategy}: " if members else
                          f"plan[{index}] {step.strategy}: " if len(self.plan) > 1 else "")
                found += [Violation(v.path, prefix + v.rule)
                          for v in job_spec.violations(self.build_job(step=step), ignore_templates=ignore_templates)]
        return found

    def _check_at_parse_time(self) -> None:
        from airflow_gpu_sched.orchestration import job_spec
        if isinstance(self.plan_spec, str):
            return  # the plan is a file or a template: checked once read or rendered, before any call
        if isinstance(self.worker_pool_specs, str) and job_spec.has_template(self.worker_pool_specs):
            return  # all of it is a template: checked after rendering
        if isinstance(self.job_spec, str):
            return  # a template file: checked once rendered, before any call
        if job_spec.has_template(self.job_spec):
            # templated values are checked once rendered; a field name is never a template
            found = [v for v in job_spec.schema_violations(job_spec.parse_given_job(self.job_spec))
                     if "Unknown name" in v.rule]
            if found:
                raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")
            return
        from airflow_gpu_sched.orchestration.templated_args import standing_in

        with standing_in(self):  # a templated scalar is checked once rendered; the rest of the job now
            found = self._violations(ignore_templates=True)
        if found:
            raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")

    def _labels(self, context: Context, submission_key: str | None) -> dict[str, str]:
        ti = context.get("ti")
        extra = {MANAGED_LABEL: MANAGED_VALUE,
                 "airflow-dag": _label_value(self.dag_id), "airflow-task": _label_value(self.task_id)}
        if ti is not None and getattr(ti, "map_index", -1) not in (-1, None):
            extra["airflow-map-index"] = str(ti.map_index)
        if ti is not None and getattr(ti, "run_id", None):  # which run owns the job (`jobs orphans`)
            extra["airflow-run"] = _label_value(ti.run_id)
        if ti is not None and isinstance(getattr(ti, "try_number", None), int):
            extra["airflow-try"] = str(ti.try_number)  # the try that submitted it (`jobs list`)
        if submission_key:
            extra[SUBMISSION_LABEL] = submission_key
        return extra

    def validated_job(self, context: Context, submission_key: str | None = None, step: Step | None = None,
                      max_wait: timedelta | None = None) -> CustomJob:
        """The job as it will be submitted (rendered), checked against every rule."""
        from airflow_gpu_sched.orchestration import job_spec
        if step is None:  # before anything runs: every step of the plan
            found = self._violations(ignore_templates=False)
            if found:
                raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")
        job = self.build_job(self._labels(context, submission_key), step, max_wait)
        found = job_spec.violations(job)
        if found:
            raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")
        return job

    # ------------------------------------------------------------------ clients (lazy)

    def client(self, location: str | None = None):
        from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient

        # Transient errors (429, 5xx, network) are retried for the transient-error window.
        retry = RetryPolicy(initial=min(1.0, self.poll_interval), maximum=30.0, deadline=self.transient_error_window)
        return VertexClient.from_connection(self.gcp_conn_id, location=location or self.location,
                                            project=self.project_id, retry=retry,
                                            impersonation_chain=self.impersonation_chain)

    # ------------------------------------------------------------------ validate -> loop(decide, act) -> result

    def execute(self, context: Context) -> Any:
        self.validated_job(context)  # bad input fails here, before any API call
        with vertex_reachable():
            ledger = SubmissionLedger.from_context(context)
            region_order.apply(self, ledger)  # region_order="observed": this run's order, kept in the ledger
            if not ledger.durable:
                self.log.warning("no task_state_store in the context: retries cannot re-attach to a job")
            return self._run(context, ledger, *self._try_started(context, ledger))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with the job's event: the loop goes on from there."""
        with vertex_reachable():
            ledger = SubmissionLedger.from_context(context)
            region_order.apply(self, ledger)
            return self._run(context, ledger, *self._job_event(context, event))

    def execute_race(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with a race's event (operators/race.py)."""
        from airflow_gpu_sched.operators import race

        with vertex_reachable():
            ledger = SubmissionLedger.from_context(context)
            region_order.apply(self, ledger)  # the plan's positions as this run decided them
            self._ledger = ledger
            return self._run(context, ledger, *race.race_event(self, context, event))

    def execute_capacity(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with the persistent resource's event."""
        with vertex_reachable():
            ledger = SubmissionLedger.from_context(context)
            region_order.apply(self, ledger)
            return self._run(context, ledger, self._capacity_event(event))

    def _run(self, context: Context, ledger: SubmissionLedger, event: engine.PlanEvent,
             ended: _Ended | None = None) -> Any:
        """The run loop (:mod:`.run`), from ``event``."""
        return run.run(self, context, ledger, event, ended)

    # ------------------------------------------------------------------ the actions' I/O

    def _try_started(self, context: Context, ledger: SubmissionLedger) -> tuple[engine.TryStarted, _Ended | None]:
        """What an earlier try left: its job, still active or ended (then as its trigger would tell)."""
        from airflow_gpu_sched.orchestration.job_types import job_type_of
        from airflow_gpu_sched.orchestration import plan_engine as engine

        resource, by_key = self._find_existing(ledger)
        found, ended = None, None
        if resource is not None:
            kind = job_type_of(resource.name)
            existing = kind.view(resource)
            event = None
            if existing.is_terminal():
                event, ended = self._job_event(context, kind.event(resource))
            else:  # closed as it is when the engine reads a CANCELLING job past its bound as ended
                ended = _Ended(kind, resource, None)
            found = engine.Found(job_name=existing.name, state=existing.state.value, ended=event, by_key=by_key)
        race_found = None
        if ledger.data.get("race"):
            from airflow_gpu_sched.operators import race

            race_found = race.found_members(self, ledger)
        return engine.TryStarted(now=_now(), try_number=_try_number(context), found=found,
                                 first_try=self._first_try(context), race_found=race_found), ended

    def _first_try(self, context: Context) -> int | None:
        """The first try since the task instance was last cleared (a clear sets ``max_tries`` to
        the tries so far plus ``retries``; Airflow reads it the same way)."""
        max_tries = getattr(context.get("ti"), "max_tries", None)
        return None if max_tries is None else int(max_tries) - (self.retries or 0) + 1

    def _find_existing(self, ledger: SubmissionLedger) -> tuple[Any, bool]:
        """The resource (of the job type) an earlier try submitted, if any; and whether it was
        found by its submission key's label."""
        location = self.positions()[int(ledger.data.get("position", 0))][1]
        if ledger.job_name:
            return vertex_calls.find_by_name(self, ledger.job_name), False
        if ledger.submission_key:  # an earlier try died between the create and saving the name
            found = vertex_calls.find_by_key(self, ledger.submission_key, location)
            if found is not None:
                ledger.record_job(found.name)
            return found, found is not None
        return None, False

    def _read_quota(self, step: Step, location: str) -> engine.QuotaRead:
        """The region's GPU quota for the step's tier against what the job holds at once."""
        from airflow_gpu_sched.orchestration import plan_engine as engine
        from airflow_gpu_sched.orchestration.quota import shortfalls

        spec = self.build_job(step=step).job_spec
        # one copy (a tuning job's trial): parallel trials past the quota wait their turn (quota.at_once)
        found = shortfalls(self.client(location), self.project_id, location, step.strategy,
                           spec.accelerator_demand())
        if found is None:
            return engine.QuotaRead(now=_now(), unreadable=True)
        return engine.QuotaRead(now=_now(), too_low="; ".join(str(s) for s in found) or None)

    def _read_resource(self, context: Context, action: engine.ReadResource) -> engine.ResourceRead:
        from airflow_gpu_sched.vertex.rules import check_persistent_fit
        from airflow_gpu_sched.orchestration import plan_engine as engine

        resource = self.client(action.location).get_persistent_resource(action.name)
        fit = check_persistent_fit(self.validated_job(context, step=action.step).job_spec, resource)
        return engine.ResourceRead(
            now=_now(), name=action.name, state=resource.state.value if resource.state else "STATE_UNSPECIFIED",
            error=resource.error.message if resource.error else None, mismatches=tuple(fit.mismatches),
            runs_now=fit.runs_now, shortages=tuple((s.resource_pool_id, s.free, s.wanted) for s in fit.shortages))

    def _read_reservation(self, context: Context, action: engine.ReadReservation) -> engine.ReservationRead:
        """The Compute Engine reservation (``reservations.get``) and the job's fit on it."""
        from airflow_gpu_sched.orchestration import plan_engine as engine
        from airflow_gpu_sched.vertex.client import NotFoundError, VertexError
        from airflow_gpu_sched.vertex.reservations import fit

        try:
            reservation = self.client(action.location).get_reservation(action.name)
        except NotFoundError:
            return engine.ReservationRead(now=_now(), name=action.name, missing=True)
        except VertexError as exc:  # no permission, or unreachable past the retries
            return engine.ReservationRead(now=_now(), name=action.name, unreadable=str(exc)[:300])
        found = fit(self.validated_job(context, step=action.step).job_spec, reservation)
        return engine.ReservationRead(now=_now(), name=action.name, problems=found.problems, free=found.free,
                                      count=found.count, needed=found.needed)

    def submit(self, context: Context, ledger: SubmissionLedger, step: Step, location: str,
               max_wait: timedelta | None = None) -> str:
        """Create the job under the ledger's submission key (a new one if none), reconciling an
        ambiguous create by that key's label; the name is saved before anything else."""
        from airflow_gpu_sched.operators.unrecorded import record_or_cancel

        key = ledger.submission_key or ledger.new_submission()
        job = self.validated_job(context, key, step, max_wait)
        created = vertex_calls.create(self, job, key, location, job.display_name)
        record_or_cancel(self.log, lambda: ledger.record_job(created.name, _try_number(context)),
                         lambda: vertex_calls.cancel(self, created.name), created.name)
        self._job_name = created.name
        observe.job_created(context, created.name, step.resource_id)
        return created.name

    def wait_for_job(self, context: Context, job_name: str) -> dict[str, Any]:
        """Wait for the job (deferred, or the same trigger in this process): its event, under the
        ledger's bound on its time before RUNNING."""
        from airflow_gpu_sched.triggers import CustomJobTrigger

        self._job_name = job_name
        ledger = self._ledger if self._ledger is not None else SubmissionLedger.from_context(context)
        running_by, why = ledger.running_bound
        trigger = CustomJobTrigger(job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                   running_by=running_by, bound_reason=why,
                                   impersonation_chain=self.impersonation_chain, stream_logs=self.stream_logs,
                                   log_lines_per_minute=self.log_lines_per_minute,
                                   observed=(ledger.data.get("observed") or {}).get(job_name))
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        return first_event(trigger)

    def wait_for_capacity(self, context: Context, resource_name: str, job_spec_json: dict[str, Any],
                          wait: timedelta | None) -> dict[str, Any]:
        """Wait for free replicas on the persistent resource (deferred, or in this process)."""
        from airflow_gpu_sched.triggers import PersistentCapacityTrigger

        deadline = time.time() + wait.total_seconds() if wait is not None else None
        trigger = PersistentCapacityTrigger(resource_name, job_spec_json, deadline, self.gcp_conn_id,
                                            self.poll_interval, self.transient_error_window,
                                            impersonation_chain=self.impersonation_chain)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_capacity")
        return first_event(trigger)

    def _job_event(self, context: Context, payload: Any) -> tuple[engine.JobEnded, _Ended | None]:
        """A trigger's job event, checked, as the plan's event (and the resource it ended as)."""
        from airflow_gpu_sched.orchestration.job_types import job_type_of
        from airflow_gpu_sched.orchestration.outcomes import Event, JOB_EVENTS, validate_event
        from airflow_gpu_sched.orchestration import plan_engine as engine

        kind, payload = validate_event(payload, JOB_EVENTS)
        now, try_number = _now(), _try_number(context)
        if kind is Event.ERROR:
            return engine.JobEnded(now=now, kind=kind, job_name=payload.get("job_name"),
                                   message=payload.get("message"), try_number=try_number), None
        job_kind = job_type_of(payload["job"]["name"])
        resource = job_kind.resource_of(payload)
        if job_kind.listed_without_details(resource):  # the poller's list page omits e.g. trials
            resource = job_kind.get(self.client(resource.name.split("/")[3]), resource.name)
        job = job_kind.view(resource)
        scheduling = job.job_spec.scheduling
        log_tail = self._failure_tail(job.name) if kind is Event.FAILED else None
        return engine.JobEnded(
            now=now, kind=kind, job_name=job.name, job_state=job.state.value if job.state else None,
            job_error=job.error.message if job.error else None, message=payload.get("message"),
            restarts=int(payload.get("observed_restarts", 0)), running_bound=payload.get("running_bound"),
            max_wait=scheduling.max_wait_duration if scheduling else None, try_number=try_number,
            log_tail=log_tail, timed_out=bool(payload.get("timed_out")),
            cancelled_waiting=bool(payload.get("cancelled_waiting")), ended_at=job.end_time or job.update_time,
        ), _Ended(job_kind, resource, payload.get("observed"))

    def _failure_tail(self, job_name: str) -> str | None:
        """The failed job's failing replica's last lines, into the task log (and the error)."""
        if not self.failure_log_lines:
            return None
        from airflow_gpu_sched.operators.job_logs import read_failure_tail

        tail = read_failure_tail(self.client(job_name.split("/")[3]), job_name, self.failure_log_lines)
        if tail:
            self.log.error("the job failed; %s", tail)
        return tail

    def _capacity_event(self, payload: Any) -> engine.CapacityEnded:
        from airflow_gpu_sched.orchestration.outcomes import CAPACITY_EVENTS, validate_event
        from airflow_gpu_sched.orchestration import plan_engine as engine

        kind, payload = validate_event(payload, CAPACITY_EVENTS)
        return engine.CapacityEnded(now=_now(), kind=kind, message=payload.get("message"))

    # ------------------------------------------------------------------ the result

    def result(self, ledger: SubmissionLedger, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
        from airflow_gpu_sched.orchestration.accounting import resolve_prices, summary_table, task_result
        from airflow_gpu_sched.orchestration.budget import settle_run_budget

        prices = resolve_prices(self.prices, self.client)  # "catalog": Google's billing catalog, cached
        settle_run_budget(ledger, prices)  # run_budget=: what was spent replaces this task's reservation
        result = task_result(ledger.attempts, ledger.preemptions, self.base_output_dir, prices, outputs)
        self.log.info("training summary:\n%s", summary_table(result))
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (the provider's listener calls it): inputs, outputs, ``gpuTraining`` facet."""
        return lineage.facets_on_complete(self, task_instance)

    def on_kill(self) -> None:
        """Sync mode (the worker polls): cancel the job when the task is killed (a race: every member)."""
        from airflow_gpu_sched.vertex.client import InvalidArgumentError

        jobs = [(name, "race member ") for name in self._race_jobs] + ([(self._job_name, "")] if self._job_name else [])
        for name, what in jobs:
            self.log.info("task killed: cancelling %s%s", what, name)
            try:
                vertex_calls.cancel(self, name)
            except InvalidArgumentError:
                pass  # already finished


@dataclass(frozen=True)
class _Ended:
    """The resource a job ended as (its record and the task's outputs are read from it)."""

    kind: JobType
    resource: Any
    observed: dict[str, Any] | None = None  # the states the trigger saw (orchestration/state_times.py)


@contextmanager
def vertex_reachable() -> Iterator[None]:
    """Calls that still fail after the client's retries (bounded by the transient-error
    window) fail the task as :class:`VertexUnreachable`, naming the last error."""
    from airflow_gpu_sched.vertex.client import QuotaExceededError, ServerError, VertexTransportError

    try:
        yield
    except (ServerError, QuotaExceededError, VertexTransportError) as exc:
        raise VertexUnreachable(f"Vertex AI unreachable: {exc}") from exc


def _argument(path: str) -> str:
    """``study_spec.metrics[0].goal`` -> ``study_spec``: the operator argument a violation is about."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def _json_arg(name: str, text: str) -> Any:
    from airflow_gpu_sched.vertex.rules import Violation
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidTrainingSpec([Violation(name, f"must be a JSON object once rendered ({exc})")]) from None


def _count_arg(name: str, value: Any) -> int | None:
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


def _count_limit(name: str, value: Any, allow_none: bool = False) -> int | None:
    from airflow_gpu_sched.vertex.rules import Violation
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        rule = "a whole number >= 0" + (" or None" if allow_none else "")
        raise InvalidTrainingSpec([Violation(name, f"must be {rule} (got {value!r})")])
    return value


def _duration_arg(name: str, value: Any) -> timedelta | None:
    from airflow_gpu_sched.orchestration.templated_args import duration

    return duration(name, value)


def _step_duration_arg(name: str, value: Any) -> timedelta | str | None:
    """A preset operator's duration for its own step: parsed now, or a template's text that the
    step's value renders (``plan_spec``) and the plan's parse checks, naming ``plan[0].<name>``."""
    from airflow_gpu_sched.orchestration.templated_args import has_template

    return value if has_template(value) else _duration_arg(name, value)


class GpuTrainingOperator(VertexTrainingOperator):
    """Train under an explicit capacity plan: ``plan=[step, ...]`` (typed steps or dicts, see
    :mod:`airflow_gpu_sched.orchestration.plans`), tried in order on capacity outcomes; or the
    plan as JSON/YAML text, a ``.json``/``.yaml`` file, or a template of the whole plan
    (``"{{ var.value.gpu_plan }}"``), checked once read or rendered, before any call."""

    def __init__(self, *, plan: list[Step | dict[str, Any]] | str, **kwargs: Any) -> None:
        super().__init__(plan=plan, **kwargs)
