"""The one base of the training operators: validate -> re-attach or submit -> defer -> decide.

Orchestration only. The job is built and checked in :mod:`job_spec` (rules in :mod:`rules`),
submissions are remembered in :mod:`ledger`, waiting is done by :mod:`triggers` (in the
triggerer when ``deferrable``, else by running the same trigger loop in the worker), a
finished job is classified in :mod:`outcomes`, and figures come from :mod:`accounting`.
Subclasses add their strategy's arguments, its ``scheduling`` block, and what a capacity
outcome means for them (:meth:`on_capacity_outcome`).

Imports of the clients (requests, google-auth, httpx) happen only when a task runs, so
importing the operators at DAG-parse time stays cheap.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from airflow_gpu_sched.orchestration import job_spec, signals
from airflow_gpu_sched.orchestration.accounting import (
    attempt_record,
    console_url,
    no_job_record,
    resolve_prices,
    summary_table,
    task_result,
)
from airflow_gpu_sched.orchestration.errors import (
    CapacityUnavailable,
    CapacityWaitExpired,
    DeadlineExceeded,
    GpuTrainingError,
    InvalidTrainingSpec,
    PersistentCapacityTimeout,
    PersistentResourceUnavailable,
    PreemptionBudgetExhausted,
    QuotaTooLow,
    TrainingJobCancelled,
    TrainingJobFailed,
    VertexUnreachable,
)
from airflow_gpu_sched.orchestration.job_types import JobOptions, get_job_type, job_type_of
from airflow_gpu_sched.orchestration.ledger import MANAGED_LABEL, MANAGED_VALUE, SUBMISSION_LABEL, SubmissionLedger
from airflow_gpu_sched.vertex.models import CustomJob, format_duration, parse_duration
from airflow_gpu_sched.orchestration.outcomes import CAPACITY_EVENTS, JOB_EVENTS, Event, validate_event
from airflow_gpu_sched.orchestration.plans import (
    FlexStartStep,
    PersistentResourceStep,
    PlanError,
    SpotStep,
    Step,
    parse_plan,
    positions,
    running_bound,
)
from airflow_gpu_sched.vertex.rules import Violation, check_persistent_fit
from airflow_gpu_sched.orchestration.watch import TRANSIENT_ERROR_WINDOW

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

CONSOLE_URL_KEY = "console_url"
MIN_FLEX_START_WAIT = timedelta(minutes=1)
AMBIGUOUS_CREATE_ATTEMPTS = 5  # creates whose outcome stayed unknown, each reconciled by label, before failing  # a shorter DWS wait is not worth a submission
JOB_NAME_KEY = "job_name"


class VertexCustomJobLink(BaseOperatorLink):
    """Extra link "Vertex AI Custom Job": the console page of the task's latest job."""

    name = "Vertex AI Custom Job"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=CONSOLE_URL_KEY, ti_key=ti_key) or ""


def _label_value(text: str) -> str:
    """Any text as a valid label value: lowercase, [a-z0-9_-], at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower())[:63].strip("-")


def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger's loop in this process until its first event (``deferrable=False``)."""

    async def _first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError(f"{trigger!r} ended without an event")

    return asyncio.run(_first())


class VertexTrainingOperator(BaseOperator):
    """Train on Vertex AI under a capacity plan: an ordered list of steps (strategies), each
    with its own knobs and regions (:mod:`airflow_gpu_sched.plans`).

    :param project_id: Google Cloud project of the job.
    :param location: region, e.g. ``us-central1`` (a step's ``locations`` override it).
    :param display_name: the job's name in Vertex AI (default ``<dag_id>-<task_id>``).
    :param worker_pool_specs: the pools, as REST JSON dicts (as in the Vertex docs) or models;
        or use the one-pool shorthand ``image_uri``, ``command``, ``args``, ``env``,
        ``machine_type``, ``accelerator_type``, ``accelerator_count``, ``replica_count``.
    :param base_output_dir: ``gs://`` prefix -> ``baseOutputDirectory``; Vertex sets
        ``AIP_CHECKPOINT_DIR=<dir>/checkpoints/`` in every worker, and every attempt of the task
        (every step and region of its plan) gets the same one, so a job resumes from the
        checkpoints an earlier attempt left.
    :param labels: job labels (the operator adds ``managed-by``, the submission key and the
        DAG/task ids).
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
    :param gcp_conn_id: Airflow connection (``google_cloud_platform`` type; extra
        ``api_endpoint`` points at another root, e.g. the emulator).
    :param deferrable: wait in the triggerer (default) or poll in the worker.
    :param poll_interval: seconds between polls.
    :param transient_error_window: seconds of failing API calls (5xx, 429, network) tolerated
        before the task fails with :class:`VertexUnreachable`.
    :param fallback: steps tried after this operator's own when capacity does not come.
    :param regions_first: on a capacity outcome try the step's next region before the next step
        (default), or every step in one region before the next region.
    :param deadline: bounds the whole plan: an absolute datetime, or a timedelta after the data
        interval's end. Steps that can no longer finish (``expected_run_time``) are skipped, a
        FLEX_START wait is clipped to the time left; past it the task fails with
        :class:`DeadlineExceeded`.
    :param expected_run_time: how long the job runs once it has its GPUs (for the deadline).
    :param prices: cost per GPU-hour, ``{"currency": "USD", "NVIDIA_H100_80GB": {"SPOT": 2.5,
        "FLEX_START": 4.0, ...}}``, or the name of an Airflow Variable holding that JSON.
    :param on_capacity_acquired, on_preempted, on_fallback: callables (or Airflow notifiers)
        handed the attempt record when a job got its GPUs, was preempted, or the plan moved on.
    """

    template_fields = ("display_name", "worker_pool_specs", "image_uri", "args", "env",
                       "base_output_dir", "labels", "study_spec", "model_display_name", "parent_model")
    template_fields_renderers = {"worker_pool_specs": "json", "env": "json", "labels": "json", "study_spec": "json"}
    operator_extra_links = (VertexCustomJobLink(),)
    ui_color = "#c9e4ff"

    def __init__(
        self,
        *,
        project_id: str,
        location: str,
        display_name: str | None = None,
        worker_pool_specs: Any = None,
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
        deferrable: bool = True,
        poll_interval: float = 30.0,
        transient_error_window: float = TRANSIENT_ERROR_WINDOW,
        plan: list[Step | dict[str, Any]] | None = None,
        fallback: list[Step | dict[str, Any]] | None = None,
        regions_first: bool = True,
        deadline: datetime | timedelta | None = None,
        expected_run_time: timedelta | float | str | None = None,
        prices: dict[str, Any] | str | None = None,
        on_capacity_acquired: Any = None,
        on_preempted: Any = None,
        on_fallback: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.project_id = project_id
        self.location = location
        self.display_name = display_name
        self.worker_pool_specs = worker_pool_specs
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
        self.timeout = _duration_arg("timeout", timeout)
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
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self.regions_first = regions_first
        if deadline is not None and not isinstance(deadline, (datetime, timedelta)):
            raise InvalidTrainingSpec([Violation("deadline", "must be a datetime or a timedelta after the "
                                                             f"data interval's end (got {deadline!r})")])
        self.deadline = deadline
        self.expected_run_time = _duration_arg("expected_run_time", expected_run_time)
        self.prices = prices
        self.on_capacity_acquired = on_capacity_acquired
        self.on_preempted = on_preempted
        self.on_fallback = on_fallback
        try:
            self.plan = parse_plan([*(plan if plan is not None else self.own_steps()), *(fallback or [])])
        except PlanError as exc:
            raise InvalidTrainingSpec(exc.violations, f"plan of {self.task_id!r}") from None
        self._job_name: str | None = None
        self._job_location: str | None = None
        self._check_at_parse_time()

    def own_steps(self) -> list[Step]:
        """The preset operators' own step (GpuTrainingOperator takes ``plan=`` instead)."""
        raise InvalidTrainingSpec([Violation("plan", "give plan=[...] steps")])

    # ------------------------------------------------------------------ the plan

    def positions(self) -> list[tuple[int, str]]:
        return positions(self.plan, self.location, self.regions_first)

    def position(self, ledger: SubmissionLedger) -> tuple[int, Step, str]:
        index = int(ledger.data.get("position", 0))
        step_index, location = self.positions()[index]
        return index, self.plan[step_index], location

    # ------------------------------------------------------------------ the job

    def build_job(self, extra_labels: dict[str, str] | None = None, step: Step | None = None,
                  max_wait: timedelta | None = None) -> CustomJob:
        step = step or self.plan[0]
        pools = job_spec.worker_pools(
            self.worker_pool_specs, image_uri=self.image_uri, command=self.command, args=self.args,
            env=self.env, machine_type=self.machine_type, accelerator_type=self.accelerator_type,
            accelerator_count=self.accelerator_count, replica_count=self.replica_count)
        labels = {**(self.labels or {}), **(extra_labels or {})}
        return job_spec.build_custom_job(
            display_name=self.display_name or f"{self.dag_id}-{self.task_id}",
            pools=pools, scheduling=step.scheduling(self.timeout, max_wait), labels=labels,
            base_output_dir=self.base_output_dir, service_account=self.service_account,
            persistent_resource_id=step.resource_id)

    def job_options(self) -> JobOptions:
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
        found = self.job_kind.violations(self.job_options())
        if ignore_templates:  # an argument that is still a Jinja template is checked once rendered
            found = [v for v in found if not job_spec.has_template(getattr(self, _argument(v.path), None))]
        for index, step in enumerate(self.plan):
            prefix = f"plan[{index}] {step.strategy}: " if len(self.plan) > 1 else ""
            found += [Violation(v.path, prefix + v.rule)
                      for v in job_spec.violations(self.build_job(step=step), ignore_templates=ignore_templates)]
        return found

    def _check_at_parse_time(self) -> None:
        if isinstance(self.worker_pool_specs, str) and job_spec.has_template(self.worker_pool_specs):
            return  # all of it is a template: checked after rendering
        found = self._violations(ignore_templates=True)
        if found:
            raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")

    def _labels(self, context: Context, submission_key: str | None) -> dict[str, str]:
        ti = context.get("ti")
        extra = {MANAGED_LABEL: MANAGED_VALUE,
                 "airflow-dag": _label_value(self.dag_id), "airflow-task": _label_value(self.task_id)}
        if ti is not None and getattr(ti, "map_index", -1) not in (-1, None):
            extra["airflow-map-index"] = str(ti.map_index)
        if submission_key:
            extra[SUBMISSION_LABEL] = submission_key
        return extra

    def validated_job(self, context: Context, submission_key: str | None = None, step: Step | None = None,
                      max_wait: timedelta | None = None) -> CustomJob:
        """The job as it will be submitted (rendered), checked against every rule."""
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
                                            project=self.project_id, retry=retry)

    # ------------------------------------------------------------------ execute

    def execute(self, context: Context) -> Any:
        self.validated_job(context)  # bad input fails here, before any API call
        with vertex_reachable():
            return self._execute(context)

    def _execute(self, context: Context) -> Any:
        ledger = SubmissionLedger.from_context(context)
        if not ledger.durable:
            self.log.warning("no task_state_store in the context: retries cannot re-attach to a job")
        resource = self._find_existing(ledger)
        if resource is not None:
            kind = job_type_of(resource.name)
            existing = kind.view(resource)
            if existing.is_terminal():  # e.g. succeeded unwatched, or cancelled by a clear: see on_job_event
                self.log.info("previous try's job %s already ended %s", existing.name, existing.state.value)
                return self.on_job_event(context, kind.event(resource), earlier_try=True)
            self.log.info("re-attaching to %s (%s), submitted by an earlier try%s", existing.name,
                          existing.state.value, "" if ledger.running_bound[0] is None else
                          " (with the same bound on its time before RUNNING)")
            return self.wait_for_job(context, existing.name, ledger.running_bound)
        return self.start(context, ledger)

    def start(self, context: Context, ledger: SubmissionLedger) -> Any:
        """Run the plan from its current position: skip what the deadline rules out, check a
        persistent resource first, else submit and wait."""
        _, step, location = self.position(ledger)
        max_wait, why_not = self._deadline_budget(context, ledger, step)
        if why_not:
            return self.fall_back(context, ledger, DeadlineExceeded(why_not), record=None)
        if isinstance(step, PersistentResourceStep):
            return self._start_on_resource(context, ledger, step, location, max_wait)
        too_low = self._quota_too_low(step, location)
        if too_low:
            record = self._no_job_record(ledger, step, location, "QUOTA_TOO_LOW", too_low)
            return self.fall_back(context, ledger, QuotaTooLow(f"{step.strategy} skipped: {too_low}"), record)
        return self._submit_and_wait(context, ledger, step, location, max_wait)

    def _quota_too_low(self, step: Step, location: str) -> str | None:
        """Why the region's GPU quota for the step's tier cannot hold the job, or None (it can,
        the preflight is off, or the quota could not be read: then a warning, and on we go)."""
        from airflow_gpu_sched.orchestration.quota import shortfalls

        if not self.quota_preflight:
            return None
        spec = self.build_job(step=step).job_spec
        parallel = self.job_kind.parallelism(self.job_options())
        demand = {acc: need * parallel for acc, need in spec.accelerator_demand().items()}
        found = shortfalls(self.client(location), self.project_id, location, step.strategy, demand)
        if found is None:
            self.log.warning("could not read the GPU quota of %s in %s (Cloud Quotas API unreachable, or no "
                             "permission cloudquotas.quotas.get): submitting without the quota preflight",
                             self.project_id, location)
            return None
        return "; ".join(str(s) for s in found) or None

    def _submit_and_wait(self, context: Context, ledger: SubmissionLedger, step: Step, location: str,
                         max_wait: timedelta | None) -> Any:
        from airflow_gpu_sched.vertex.client import QuotaExceededError

        try:
            name = self.submit(context, ledger, step, location, max_wait)
        except QuotaExceededError as exc:
            if not exc.is_resource_quota:  # a request-rate limit past the window: not a capacity outcome
                raise
            # The job alone needs more GPUs than the region's quota: a capacity outcome, the plan moves on
            record = self._no_job_record(ledger, step, location, "QUOTA_EXCEEDED", str(exc))
            return self.fall_back(context, ledger, self._quota_error("refused at create", exc.message,
                                                                     location), record)
        bound = self._running_bound(context, ledger, step)
        ledger.set_running_bound(bound[0].timestamp() if bound else None, bound[1] if bound else None)
        return self.wait_for_job(context, name, ledger.running_bound)

    def _running_bound(self, context: Context, ledger: SubmissionLedger, step: Step) -> tuple[datetime, str] | None:
        """By when the job just submitted must first be RUNNING (:func:`plans.running_bound`),
        counted from its submission (a persistent pool's wait before it had its own bound)."""
        return running_bound(step, datetime.now(timezone.utc), self._deadline(context, ledger), self.expected_run_time)

    def _quota_error(self, how: str, message: str | None, location: str) -> QuotaTooLow:
        """The service's own quota verdict (a 429 at create, a pipeline FAILED code 8): the same
        remedy as the preflight's, so the same error type once the plan is spent."""
        from airflow_gpu_sched.orchestration.quota import increase_hint

        return QuotaTooLow(f"the GPU quota is too low for this job in {location}: {how} by Vertex AI; "
                           + increase_hint(message or "", location, self.project_id), None, message)

    def _deadline_budget(self, context: Context, ledger: SubmissionLedger,
                         step: Step) -> tuple[timedelta | None, str | None]:
        """(the FLEX_START / capacity wait clipped to the deadline, or why the step cannot run)."""
        deadline = self._deadline(context, ledger)
        if deadline is None:
            return None, None
        left = deadline - datetime.now(timezone.utc)
        needed = self.expected_run_time or timedelta(0)
        if left <= needed:
            return None, (f"deadline {deadline.isoformat()}: {max(left, timedelta(0))} left, the job needs "
                          f"{needed} to run: {step.strategy} skipped")
        wait = left - needed
        if isinstance(step, FlexStartStep):
            if wait < MIN_FLEX_START_WAIT:
                return None, (f"deadline {deadline.isoformat()}: only {wait} would be left to wait for FLEX_START "
                              f"capacity (less than {MIN_FLEX_START_WAIT}): FLEX_START skipped")
            own = step.max_wait_duration
            return (wait if not own or own > wait else own), None
        return wait, None

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
                ledger.data["started_at"] = datetime.now(timezone.utc).isoformat()
                ledger.save()
            anchor = datetime.fromisoformat(ledger.data["started_at"])
        return anchor + self.deadline

    def _start_on_resource(self, context: Context, ledger: SubmissionLedger, step: PersistentResourceStep,
                           location: str, max_wait: timedelta | None) -> Any:
        name = f"projects/{self.project_id}/locations/{location}/persistentResources/{step.resource_id}"
        resource = self.client(location).get_persistent_resource(name)
        state = resource.state.value if resource.state else "STATE_UNSPECIFIED"
        if state in ("ERROR", "STOPPING"):
            message = resource.error.message if resource.error else None
            record = self._no_job_record(ledger, step, location, f"RESOURCE_{state}", message)
            return self.fall_back(context, ledger, PersistentResourceUnavailable(
                f"persistent resource {name} is {state}", None, message), record)
        job = self.validated_job(context, step=step)
        fit = check_persistent_fit(job.job_spec, resource)
        if fit.mismatches:
            raise InvalidTrainingSpec(fit.mismatches, f"job for persistent resource {step.resource_id!r}")
        if state == "RUNNING" and fit.runs_now:
            return self._submit_and_wait(context, ledger, step, location, None)
        waits = [w for w in (step.capacity_wait_timeout, max_wait) if w is not None]
        wait = min(waits) if waits else None
        self.log.info("persistent resource %s is %s%s: waiting up to %s for capacity", name, state,
                      "".join(f"; pool {s.resource_pool_id} has {s.free} of {s.wanted} replicas free"
                              for s in fit.shortages), wait or "ever")
        ledger.note_waiting_since(datetime.now(timezone.utc))
        return self.wait_for_capacity(context, name, job.job_spec.to_api(), wait)

    def wait_for_capacity(self, context: Context, resource_name: str, job_spec_json: dict[str, Any],
                          wait: timedelta | None) -> Any:
        from airflow_gpu_sched.triggers import PersistentCapacityTrigger

        deadline = time.time() + wait.total_seconds() if wait is not None else None
        trigger = PersistentCapacityTrigger(resource_name, job_spec_json, deadline, self.gcp_conn_id,
                                            self.poll_interval, self.transient_error_window)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_capacity")
        return self._on_capacity_event(context, first_event(trigger))

    def execute_capacity(self, context: Context, event: dict[str, Any]) -> Any:
        with vertex_reachable():
            return self._on_capacity_event(context, event)

    def _on_capacity_event(self, context: Context, event: Any) -> Any:
        kind, event = validate_event(event, CAPACITY_EVENTS)
        ledger = SubmissionLedger.from_context(context)
        _, step, location = self.position(ledger)
        message = event.get("message")
        if kind is Event.CAPACITY_AVAILABLE:
            self.log.info("capacity is free (%s): submitting", message)
            return self._submit_and_wait(context, ledger, step, location, None)
        if kind is Event.ERROR:
            raise VertexUnreachable(message or "Vertex AI unreachable")
        outcome = "CAPACITY_TIMEOUT" if kind is Event.CAPACITY_TIMEOUT else "RESOURCE_UNAVAILABLE"
        record = self._no_job_record(ledger, step, location, outcome, message)
        error_type = PersistentCapacityTimeout if kind is Event.CAPACITY_TIMEOUT else PersistentResourceUnavailable
        return self.fall_back(context, ledger, error_type(
            f"persistent resource {step.resource_id} {'stayed busy past its capacity wait' if kind is Event.CAPACITY_TIMEOUT else 'cannot take the job'}",
            None, message), record)

    def _find_existing(self, ledger: SubmissionLedger) -> Any:
        """The resource (of the job type) an earlier try submitted, if any."""
        _, _, location = self.position(ledger)
        if ledger.job_name:
            return job_type_of(ledger.job_name).get(self.client(location), ledger.job_name)
        if ledger.submission_key:  # an earlier try died between the create and saving the name
            found = self._find_by_key(ledger.submission_key, location)
            if found is not None:
                ledger.record_job(found.name)
            return found
        return None

    def _find_by_key(self, key: str, location: str) -> Any:
        flt = f'labels.{SUBMISSION_LABEL}="{key}"'
        page = self.job_kind.list_page(self.client(location), flt, 10, None)
        return next(iter(self.job_kind.items(page)), None)

    def submit(self, context: Context, ledger: SubmissionLedger, step: Step | None = None,
               location: str | None = None, max_wait: timedelta | None = None) -> str:
        from airflow_gpu_sched.vertex.client import AmbiguousCreateError

        if step is None or location is None:
            _, step, location = self.position(ledger)
        key = ledger.submission_key or ledger.new_submission()
        job = self.validated_job(context, key, step, max_wait)
        client = self.client(location)
        for attempt in range(1, AMBIGUOUS_CREATE_ATTEMPTS + 1):
            try:
                created = self.job_kind.create(client, self.job_kind.body(job, self.job_options()))
                break
            except AmbiguousCreateError as exc:
                # The create may or may not have made a job: the submission-key label says which.
                created = self._find_by_key(key, location)
                if created is not None:
                    break
                if attempt == AMBIGUOUS_CREATE_ATTEMPTS:
                    raise
                self.log.warning("create of %s was ambiguous (%s) and no job carries its key: creating again",
                                 job.display_name, exc)
        ledger.record_job(created.name, _try_number(context))
        self._job_name = created.name
        ti = context.get("ti")
        if ti is not None:
            ti.xcom_push(key=JOB_NAME_KEY, value=created.name)
            ti.xcom_push(key=CONSOLE_URL_KEY, value=console_url(created.name))
        self.log.info("submitted %s (%s in %s, attempt %d)", created.name, step.describe(), location,
                      len(ledger.attempts) + 1)
        return created.name

    def wait_for_job(self, context: Context, job_name: str,
                     bound: tuple[float | None, str | None] = (None, None)) -> Any:
        """Wait for the job; ``bound``: (epoch seconds by which it must first be RUNNING, why)."""
        from airflow_gpu_sched.triggers import CustomJobTrigger

        self._job_name = job_name
        running_by, why = bound
        trigger = CustomJobTrigger(job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window,
                                   running_by=running_by, bound_reason=why)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        return self.on_job_event(context, first_event(trigger))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        with vertex_reachable():
            return self.on_job_event(context, event)

    def on_job_event(self, context: Context, event: Any, earlier_try: bool = False) -> Any:
        """Decide on a finished job; ``earlier_try``: it was found, finished, at this try's start."""
        kind, event = validate_event(event, JOB_EVENTS)
        ledger = SubmissionLedger.from_context(context)
        # a job an earlier try submitted (this try re-attached to it, or found it finished)
        reattached = earlier_try or ledger.job_try != _try_number(context)
        if kind is Event.ERROR:
            raise VertexUnreachable(event.get("message") or "Vertex AI unreachable", event.get("job_name"))
        job_kind = job_type_of(event["job"]["name"])
        resource = job_kind.resource_of(event)
        if job_kind.listed_without_details(resource):  # the poller's list page omits e.g. trials
            resource = job_kind.get(self.client(resource.name.split("/")[3]), resource.name)
        job = job_kind.view(resource)
        index, step, location = self.position(ledger)
        restarts = int(event.get("observed_restarts", 0))
        preemptions = restarts + (1 if kind is Event.PREEMPTED else 0)
        record = attempt_record(job, step.strategy, kind.value, restarts, job_kind.gpu_hours(resource))
        record.update(position=index, location=location)
        bounded = kind is Event.CAPACITY_TIMEOUT and bool(event.get("running_bound"))  # our cancel, past the bound
        if kind is Event.QUOTA_EXCEEDED or bounded:  # visible as such, not as the job's FAILED / CANCELLED
            record.update(state="QUOTA_EXCEEDED" if kind is Event.QUOTA_EXCEEDED else "CAPACITY_TIMEOUT",
                          error=event.get("message") or record["error"])
        ledger.finish_attempt(record, preemptions, completed=kind is Event.SUCCEEDED)
        self.log.info("%s ended %s: queued %.0fs, ran %.0fs, %.3f GPU-hours", job.name, job.state.value,
                      record["queued_seconds"], record["run_seconds"], record["gpu_hours"])
        signals.attempt_finished(self, record, preemptions)
        if kind is Event.SUCCEEDED:
            return self.result(ledger, job_kind.outputs(resource))
        message = job.error.message if job.error else None
        if kind is Event.CANCELLED:
            if reattached:
                # An earlier try's job: a user cleared or failed that try, and its trigger's on_kill
                # cancelled the job (possibly after this try re-attached to it). This try trains anew.
                self.log.info("the job %s an earlier try submitted was cancelled (the task was cleared or "
                              "marked failed): submitting a new one", job.name)
                return self.start(context, ledger)
            raise TrainingJobCancelled("the job was cancelled outside this task", job.name, message)
        if kind is Event.FAILED:
            raise TrainingJobFailed("the training job failed (not a capacity problem: not resubmitted)",
                                    job.name, message)
        if kind is Event.PREEMPTED and isinstance(step, SpotStep):
            preempted_here = ledger.count(Event.PREEMPTED.value, index)
            if preempted_here <= step.max_preemption_retries:
                self.log.warning("%s was preempted past the service's restarts: resubmitting (%d of %d), "
                                 "resuming from the checkpoints in %s", job.name, preempted_here,
                                 step.max_preemption_retries, self.base_output_dir or "(no base_output_dir!)")
                return self._submit_and_wait(context, ledger, step, location, None)
            error: GpuTrainingError = PreemptionBudgetExhausted(
                f"SPOT job preempted past the service's restarts {preempted_here} time(s); "
                f"max_preemption_retries={step.max_preemption_retries} spent", job.name, message)
        elif bounded:
            error = CapacityWaitExpired(f"{step.strategy} job not RUNNING within its bound "
                                        f"({event['running_bound']}): cancelled", job.name, event.get("message"))
        elif kind is Event.CAPACITY_TIMEOUT:
            # Named from the job's own spec: an EXPIRED job carries no error message to quote.
            wait = job.job_spec.scheduling.max_wait_duration if job.job_spec.scheduling else None
            waited = f"maxWaitDuration ({format_duration(wait)})" if wait is not None else "maxWaitDuration"
            error = CapacityWaitExpired(f"FLEX_START capacity never came: the job waited its {waited} "
                                        "without getting all its GPUs at once", job.name,
                                        message or f"the job ended {job.state.value}")
        elif kind is Event.QUOTA_EXCEEDED:
            error = self._quota_error(f"{job.name} FAILED for quota", message, location)
        elif kind is Event.PREEMPTED:  # on a step that is not SPOT: the service gave up for want of capacity
            error = CapacityUnavailable(f"{step.strategy}: no capacity, the service gave up after its own "
                                        "retries (stockout)", job.name, message)
        else:
            error = CapacityUnavailable(f"the job ended by {kind.value}", job.name, message)
        return self.fall_back(context, ledger, error, record=None)

    def fall_back(self, context: Context, ledger: SubmissionLedger, error: GpuTrainingError,
                  record: dict[str, Any] | None) -> Any:
        """A capacity outcome: move to the plan's next position, or fail with ``error``."""
        index, step, location = self.position(ledger)
        if record is not None:
            ledger.finish_attempt(record)
        nxt = index + 1
        if nxt >= len(self.positions()):
            raise error  # the plan is spent: fail with what the last step ran into
        next_step, next_location = self.plan[self.positions()[nxt][0]], self.positions()[nxt][1]
        self.log.warning("capacity outcome on %s in %s (%s): falling back to %s in %s", step.describe(), location,
                         error, next_step.describe(), next_location)
        signals.fell_back(self, {"from": step.strategy, "from_location": location, "to": next_step.strategy,
                                 "to_location": next_location, "reason": str(error)})
        ledger.move_to(nxt)
        return self.start(context, ledger)

    def _no_job_record(self, ledger: SubmissionLedger, step: Step, location: str, state: str,
                       error: str | None) -> dict[str, Any]:
        """An attempt that never got a job (a busy or failed persistent pool, a quota refusal)."""
        since = ledger.data.get("waiting_since")
        waited = (datetime.now(timezone.utc) - datetime.fromisoformat(since)).total_seconds() if since else 0.0
        index, _, _ = self.position(ledger)
        return no_job_record(step.strategy, state, waited, error, position=index, location=location)

    def result(self, ledger: SubmissionLedger, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
        result = task_result(ledger.attempts, ledger.preemptions, self.base_output_dir, resolve_prices(self.prices),
                             outputs)
        self.log.info("training summary:\n%s", summary_table(result))
        return result

    def on_kill(self) -> None:
        """Sync mode (the worker polls): cancel the job when the task is killed."""
        if self._job_name:
            from airflow_gpu_sched.vertex.client import InvalidArgumentError

            self.log.info("task killed: cancelling %s", self._job_name)
            try:
                job_type_of(self._job_name).cancel(self.client(self._job_name.split("/")[3]), self._job_name)
            except InvalidArgumentError:
                pass  # already finished


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
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidTrainingSpec([Violation(name, f"must be a JSON object once rendered ({exc})")]) from None


def _try_number(context: Context) -> int | None:
    return getattr(context.get("ti"), "try_number", None)


def _duration_arg(name: str, value: Any) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InvalidTrainingSpec([Violation(name, str(exc))]) from None


class GpuTrainingOperator(VertexTrainingOperator):
    """Train under an explicit capacity plan: ``plan=[step, ...]`` (typed steps or dicts, see
    :mod:`airflow_gpu_sched.plans`), tried in order on capacity outcomes."""

    def __init__(self, *, plan: list[Step | dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(plan=plan, **kwargs)
