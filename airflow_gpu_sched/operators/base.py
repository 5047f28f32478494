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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator, BaseOperatorLink

from airflow_gpu_sched import job_spec
from airflow_gpu_sched.errors import (
    InvalidTrainingSpec,
    TrainingJobCancelled,
    TrainingJobFailed,
    VertexUnreachable,
)
from airflow_gpu_sched.ledger import MANAGED_LABEL, MANAGED_VALUE, SUBMISSION_LABEL, SubmissionLedger
from airflow_gpu_sched.models import CustomJob, parse_duration
from airflow_gpu_sched.outcomes import JOB_EVENTS, Event, event_for_job, validate_event
from airflow_gpu_sched.watch import TRANSIENT_ERROR_WINDOW

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

CONSOLE_URL_KEY = "console_url"
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
    """Base of the training operators; see the subclasses for each capacity strategy.

    :param project_id: Google Cloud project of the job.
    :param location: region, e.g. ``us-central1``.
    :param display_name: the job's name in Vertex AI (default ``<dag_id>-<task_id>``).
    :param worker_pool_specs: the pools, as REST JSON dicts (as in the Vertex docs) or models;
        or use the one-pool shorthand ``image_uri``, ``command``, ``args``, ``env``,
        ``machine_type``, ``accelerator_type``, ``accelerator_count``, ``replica_count``.
    :param base_output_dir: ``gs://`` prefix -> ``baseOutputDirectory``; Vertex sets
        ``AIP_CHECKPOINT_DIR=<dir>/checkpoints/`` in every worker, and every attempt of the task
        gets the same one, so a resubmitted job resumes from its checkpoints.
    :param labels: job labels (the operator adds ``managed-by``, the submission key and the
        DAG/task ids).
    :param timeout: the job's run-time limit (timedelta, seconds, ``"2h"``, ``"1800s"``).
    :param service_account: the job's service account.
    :param gcp_conn_id: Airflow connection (``google_cloud_platform`` type; extra
        ``api_endpoint`` points at another root, e.g. the emulator).
    :param deferrable: wait in the triggerer (default) or poll in the worker.
    :param poll_interval: seconds between polls.
    :param transient_error_window: seconds of failing polls (5xx, 429, network) tolerated before
        the task fails with :class:`VertexUnreachable`.
    """

    template_fields = ("display_name", "worker_pool_specs", "image_uri", "args", "env",
                       "base_output_dir", "labels")
    template_fields_renderers = {"worker_pool_specs": "json", "env": "json", "labels": "json"}
    operator_extra_links = (VertexCustomJobLink(),)
    ui_color = "#c9e4ff"

    strategy: ClassVar[str] = "STANDARD"

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
        gcp_conn_id: str = "google_cloud_default",
        deferrable: bool = True,
        poll_interval: float = 30.0,
        transient_error_window: float = TRANSIENT_ERROR_WINDOW,
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
        self.gcp_conn_id = gcp_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.transient_error_window = float(transient_error_window)
        self._job_name: str | None = None
        self._check_at_parse_time()

    # ------------------------------------------------------------------ the job

    def scheduling(self) -> dict[str, Any]:
        """The job's ``scheduling`` block (subclasses add their strategy's fields)."""
        block: dict[str, Any] = {"strategy": self.strategy}
        if self.timeout is not None:
            block["timeout"] = self.timeout
        return block

    def persistent_resource(self) -> str | None:
        return None

    def build_job(self, extra_labels: dict[str, str] | None = None) -> CustomJob:
        pools = job_spec.worker_pools(
            self.worker_pool_specs, image_uri=self.image_uri, command=self.command, args=self.args,
            env=self.env, machine_type=self.machine_type, accelerator_type=self.accelerator_type,
            accelerator_count=self.accelerator_count, replica_count=self.replica_count)
        labels = {**(self.labels or {}), **(extra_labels or {})}
        return job_spec.build_custom_job(
            display_name=self.display_name or f"{self.dag_id}-{self.task_id}",
            pools=pools, scheduling=self.scheduling(), labels=labels, base_output_dir=self.base_output_dir,
            service_account=self.service_account, persistent_resource_id=self.persistent_resource())

    def _check_at_parse_time(self) -> None:
        if isinstance(self.worker_pool_specs, str) and job_spec.has_template(self.worker_pool_specs):
            return  # all of it is a template: checked after rendering
        job = self.build_job()
        found = job_spec.violations(job, ignore_templates=True)
        if found:
            raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")

    def validated_job(self, context: Context, submission_key: str | None = None) -> CustomJob:
        """The job as it will be submitted (rendered), checked against every rule."""
        ti = context.get("ti")
        extra = {MANAGED_LABEL: MANAGED_VALUE,
                 "airflow-dag": _label_value(self.dag_id), "airflow-task": _label_value(self.task_id)}
        if ti is not None and getattr(ti, "map_index", -1) not in (-1, None):
            extra["airflow-map-index"] = str(ti.map_index)
        if submission_key:
            extra[SUBMISSION_LABEL] = submission_key
        job = self.build_job(extra)
        found = job_spec.violations(job)
        if found:
            raise InvalidTrainingSpec(found, f"{type(self).__name__} {self.task_id!r}")
        return job

    # ------------------------------------------------------------------ clients (lazy)

    def client(self):
        from airflow_gpu_sched.client import RetryPolicy, VertexClient

        # Transient errors (429, 5xx, network) are retried for the transient-error window.
        retry = RetryPolicy(initial=min(1.0, self.poll_interval), maximum=30.0, deadline=self.transient_error_window)
        return VertexClient.from_connection(self.gcp_conn_id, location=self.location, project=self.project_id,
                                            retry=retry)

    # ------------------------------------------------------------------ execute

    def execute(self, context: Context) -> Any:
        self.validated_job(context)  # bad input fails here, before any API call
        with vertex_reachable():
            return self._execute(context)

    def _execute(self, context: Context) -> Any:
        ledger = SubmissionLedger.from_context(context)
        if not ledger.durable:
            self.log.warning("no task_state_store in the context: retries cannot re-attach to a job")
        existing = self._find_existing(ledger)
        if existing is not None:
            if existing.is_terminal():
                self.log.info("previous try's job %s already ended %s", existing.name, existing.state.value)
                return self.on_job_event(context, event_for_job(existing))
            self.log.info("re-attaching to %s (%s), submitted by an earlier try", existing.name, existing.state.value)
            return self.wait_for_job(context, existing.name)
        return self.start(context, ledger)

    def start(self, context: Context, ledger: SubmissionLedger) -> Any:
        """Submit and wait. (The persistent-resource operator checks capacity first.)"""
        return self.wait_for_job(context, self.submit(context, ledger))

    def _find_existing(self, ledger: SubmissionLedger) -> CustomJob | None:
        if ledger.job_name:
            return self.client().get_custom_job(ledger.job_name)
        if ledger.submission_key:  # an earlier try died between the create and saving the name
            found = self._find_by_key(ledger.submission_key)
            if found is not None:
                ledger.record_job(found.name)
            return found
        return None

    def _find_by_key(self, key: str) -> CustomJob | None:
        flt = f'labels.{SUBMISSION_LABEL}="{key}"'
        return next(iter(self.client().list_custom_jobs(filter=flt, page_size=10)), None)

    def submit(self, context: Context, ledger: SubmissionLedger) -> str:
        from airflow_gpu_sched.client import AmbiguousCreateError

        key = ledger.submission_key or ledger.new_submission()
        job = self.validated_job(context, key)
        client = self.client()
        try:
            created = client.create_custom_job(job)
        except AmbiguousCreateError as exc:
            # The create may or may not have made a job: the label says which.
            created = self._find_by_key(key)
            if created is None:
                self.log.warning("create of %s was ambiguous (%s) and no job carries its key: creating again",
                                 job.display_name, exc)
                created = client.create_custom_job(job)
        ledger.record_job(created.name)
        self._job_name = created.name
        ti = context.get("ti")
        if ti is not None:
            from airflow_gpu_sched.accounting import console_url

            ti.xcom_push(key=JOB_NAME_KEY, value=created.name)
            ti.xcom_push(key=CONSOLE_URL_KEY, value=console_url(created.name))
        self.log.info("submitted %s (%s, attempt %d)", created.name, self.strategy, len(ledger.attempts) + 1)
        return created.name

    def wait_for_job(self, context: Context, job_name: str) -> Any:
        from airflow_gpu_sched.triggers import CustomJobTrigger

        self._job_name = job_name
        trigger = CustomJobTrigger(job_name, self.gcp_conn_id, self.poll_interval, self.transient_error_window)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        return self.on_job_event(context, first_event(trigger))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        with vertex_reachable():
            return self.on_job_event(context, event)

    def on_job_event(self, context: Context, event: Any) -> Any:
        from airflow_gpu_sched.accounting import attempt_record, task_result

        kind, event = validate_event(event, JOB_EVENTS)
        ledger = SubmissionLedger.from_context(context)
        if kind is Event.ERROR:
            raise VertexUnreachable(event.get("message") or "Vertex AI unreachable", event.get("job_name"))
        job = CustomJob.model_validate(event["job"])
        restarts = int(event.get("observed_restarts", 0))
        preemptions = restarts + (1 if kind is Event.PREEMPTED else 0)
        record = attempt_record(job, self.strategy, kind.value, restarts)
        ledger.finish_attempt(record, preemptions, completed=kind is Event.SUCCEEDED)
        self.log.info("%s ended %s: queued %.0fs, ran %.0fs, %.3f GPU-hours", job.name, job.state.value,
                      record["queued_seconds"], record["run_seconds"], record["gpu_hours"])
        if kind is Event.SUCCEEDED:
            return task_result(ledger.attempts, ledger.preemptions, self.base_output_dir)
        message = job.error.message if job.error else None
        if kind is Event.CANCELLED:
            raise TrainingJobCancelled("the job was cancelled outside this task", job.name, message)
        if kind is Event.FAILED:
            raise TrainingJobFailed("the training job failed (not a capacity problem: not resubmitted)",
                                    job.name, message)
        return self.on_capacity_outcome(context, ledger, kind, job)

    def on_capacity_outcome(self, context: Context, ledger: SubmissionLedger, kind: Event, job: CustomJob) -> Any:
        """PREEMPTED or CAPACITY_TIMEOUT: each strategy decides (resubmit, or fail typed)."""
        raise TrainingJobFailed(f"the job ended by {kind.value}", job.name, job.error.message if job.error else None)

    def on_kill(self) -> None:
        """Sync mode (the worker polls): cancel the job when the task is killed."""
        if self._job_name:
            from airflow_gpu_sched.client import InvalidArgumentError

            self.log.info("task killed: cancelling %s", self._job_name)
            try:
                self.client().cancel_custom_job(self._job_name)
            except InvalidArgumentError:
                pass  # already finished


@contextmanager
def vertex_reachable() -> Iterator[None]:
    """Calls that still fail after the client's retries (bounded by the transient-error
    window) fail the task as :class:`VertexUnreachable`, naming the last error."""
    from airflow_gpu_sched.client import QuotaExceededError, ServerError, VertexTransportError

    try:
        yield
    except (ServerError, QuotaExceededError, VertexTransportError) as exc:
        raise VertexUnreachable(f"Vertex AI unreachable: {exc}") from exc


def _duration_arg(name: str, value: Any) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        from airflow_gpu_sched.rules import Violation

        raise InvalidTrainingSpec([Violation(name, str(exc))]) from None
