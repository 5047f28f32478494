"""The Airflow face of the training operators: template fields, an ``__init__`` that stores,
the entry points (``execute`` and the ``execute_*`` methods a trigger names), the waits that
defer, ``on_kill`` and the OpenLineage hook. Nothing else lives here:

- the arguments, grouped and checked, and the job they build: :mod:`orchestration.training_spec`;
- the run loop (decide, carry the action out, feed back what came of it): :mod:`.run`;
- every call to Vertex AI (find, create, cancel, preflight reads, failure tail): :mod:`.vertex_calls`;
- a trigger's event (or an earlier try's job) as the plan's event: :mod:`.events`;
- what the task tells the world (log lines, metrics, callbacks, XCom, links, summary): :mod:`.observe`.

The clients, the pydantic models and :mod:`plan_engine` load when an operator is built or a task
runs: importing the operators at DAG-parse time stays cheap.

May import: vertex, orchestration, triggers, operators; airflow.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_gpu_sched import compat
from airflow_gpu_sched.operators import events, lineage, links, region_order, run, running, vertex_calls, waits
from airflow_gpu_sched.operators.run import ERRORS  # noqa: F401 (importable here, as before)
from airflow_gpu_sched.operators.links import LINKS, ConsoleLink
from airflow_gpu_sched.operators.running import first_event
from airflow_gpu_sched.orchestration import assets, training_spec
from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
from airflow_gpu_sched.orchestration.ledger import SubmissionLedger
from airflow_gpu_sched.vertex.defaults import TRANSIENT_ERROR_WINDOW

AIRFLOW_FAIL_METHOD = "__fail__"  # Airflow's TRIGGER_FAIL_REPR: a deferral resumed only to fail

if TYPE_CHECKING:  # the pydantic models, rules and job types load when a task runs, not at DAG parse
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_gpu_sched.orchestration.plans import Step
    from airflow_gpu_sched.vertex.models import CustomJob

STRUCTURED = ("job_spec", "worker_pool_specs", "plan_spec")  # parsed, then rendered value by value (_render_structured)


class VertexCustomJobLink(ConsoleLink):
    """Extra link "Vertex AI Custom Job": the console page of the task's latest custom job (the
    other job types, the resource, model and logs: :mod:`airflow_gpu_sched.operators.links`).
    Defined here: its class path is the one serialized DAGs and the provider info name."""

    name = "Vertex AI Custom Job"
    key = "custom_job"


class VertexTrainingOperator(BaseOperator):
    __doc__ = """Train on Vertex AI under a capacity plan: an ordered list of steps (strategies), each
    with its own knobs and regions (:mod:`airflow_gpu_sched.orchestration.plans`).

    The arguments (flat; kept, grouped and checked by :mod:`airflow_gpu_sched.orchestration.training_spec`,
    whose ``PARAMETERS`` text is appended here):
""" + training_spec.PARAMETERS  # help() and the docs show them all

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
        deferrable: bool = compat.conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 30.0,
        transient_error_window: float = TRANSIENT_ERROR_WINDOW,
        plan: list[Step | dict[str, Any]] | None = None,
        fallback: list[Step | dict[str, Any]] | None = None,
        hardware: list[dict[str, Any]] | None = None,
        regions_first: bool = True,
        deadline: datetime | timedelta | None = None,
        expected_run_time: timedelta | float | str | None = None,
        prices: dict[str, Any] | str | None = None,
        budget: float | None = None, plan_objective: str | None = None,
        run_budget: Any = None,
        on_capacity_acquired: Any = None,
        on_preempted: Any = None,
        on_fallback: Any = None,
        retry_on_user_code_failure: bool = False,
        stream_logs: bool = True,
        log_lines_per_minute: int | None = 600,
        failure_log_lines: int = 50,
        resubmit_on: list[int | str] | None = None, max_failure_resubmits: int = 0,
        **kwargs: Any,
    ) -> None:
        given = {name: value for name, value in locals().items() if name not in ("self", "kwargs", "__class__")}
        if kwargs.get("outlets") is None:  # none declared: the output dir's and the model's Assets
            kwargs["outlets"] = assets.default_outlets(project_id, location, job_type, base_output_dir,
                                                       model_display_name)
        super().__init__(**kwargs)
        training_spec.store(self, given)  # every argument, grouped and checked (orchestration/training_spec.py)
        self.running_job: str | None = None  # the job on_kill cancels (sync mode)
        self.run_ledger: SubmissionLedger | None = None  # the running loop's
        self.race_jobs: list[str] = []  # a race's members on_kill cancels (sync mode)
        self.try_key: tuple | None = None  # the running try (orchestration/stops.py): on_kill stops it
        self.execution_deadline: datetime | None = None  # execution_timeout's end, kept through deferrals
        training_spec.check_at_parse_time(self)

    def own_steps(self) -> list[Step]:
        """The preset operators' own step (GpuTrainingOperator takes ``plan=`` instead)."""
        from airflow_gpu_sched.vertex.rules import Violation

        raise InvalidTrainingSpec([Violation("plan", "give plan=[...] steps")])

    # ------------------------------------------------------------------ templating

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render, then parse the rendered plan: a templated step value is checked here, before
        any call (a literal one was checked when the DAG was parsed)."""
        from airflow_gpu_sched.orchestration import structured_render
        from airflow_gpu_sched.orchestration.templated_args import TEMPLATED_SCALARS

        # template_ext applies to no string value: an argument such as args=["--config=c.yaml"]
        # stays text instead of being read as a template file (job_spec's file is read below)
        jinja_env = jinja_env or self.get_template_env()
        self.template_ext = ()
        try:  # job_spec, worker_pool_specs, the plan: parsed first, then each string value rendered,
            # so a rendered value cannot change the job's structure (orchestration/structured_render.py)
            def render(text: str) -> Any:
                return self.render_template(text, context, jinja_env, set())

            def read_file(path: str) -> str:
                return jinja_env.loader.get_source(jinja_env, path)[0]

            self.job_spec = structured_render.render_job_spec(self.job_spec, render, read_file)
            self.plan_spec = structured_render.render_plan(self.plan_spec, render, read_file)
            self.worker_pool_specs = structured_render.render_worker_pool_specs(self.worker_pool_specs, render)
            self._do_render_template_fields(self, [f for f in self.template_fields if f not in STRUCTURED], context,
                                            jinja_env, set())
        finally:
            del self.template_ext  # back to the class's
        self.plan = training_spec.parse_plan(self, ignore_templates=False)
        training_spec.set_scalars(self, {name: getattr(self, name) for name in TEMPLATED_SCALARS},
                                  keep_templates=False)

    def resolve_template_files(self) -> None:
        """At DAG parse, read job_spec's and the plan's file (only theirs: see render_template_fields)."""
        env = self.get_template_env()
        if isinstance(self.job_spec, str) and self.job_spec.endswith(tuple(self.template_ext)):
            try:
                self.job_spec = env.loader.get_source(env, self.job_spec)[0]
            except Exception:  # not found from here: rendering reads it (or names the error)
                self.log.debug("job_spec file %s not resolved at parse time", self.job_spec)
        if isinstance(self.plan_spec, str) and self.plan_spec.strip().endswith(tuple(self.template_ext)):
            from airflow_gpu_sched.orchestration.structured_render import plan_from_text

            try:
                text = env.loader.get_source(env, self.plan_spec.strip())[0]
            except Exception:  # not found from here: rendering reads it (or names the error)
                self.log.debug("plan file %s not resolved at parse time", self.plan_spec)
            else:
                self.plan_spec = plan_from_text(text)
                self.plan = training_spec.parse_plan(self, ignore_templates=True)
        self.prepare_template()

    # ------------------------------------------------------------------ the spec (orchestration/training_spec.py)

    def positions(self) -> list[tuple[int, str]]:
        return training_spec.positions(self)

    def build_job(self, extra_labels: dict[str, str] | None = None, step: Step | None = None,
                  max_wait: timedelta | None = None) -> CustomJob:
        return training_spec.build_job(self, extra_labels, step, max_wait)

    def validated_job(self, context: Context, submission_key: str | None = None, step: Step | None = None,
                      max_wait: timedelta | None = None) -> CustomJob:
        """The job as it will be submitted (rendered), checked against every rule."""
        return training_spec.validated_job(self, context, submission_key, step, max_wait)

    def client(self, location: str | None = None):
        from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient

        # Transient errors (429, 5xx, network) are retried for the transient-error window.
        retry = RetryPolicy(initial=min(1.0, self.poll_interval), maximum=30.0, deadline=self.transient_error_window)
        return VertexClient.from_connection(self.gcp_conn_id, location=location or self.location,
                                            project=self.project_id, retry=retry,
                                            impersonation_chain=self.impersonation_chain)

    # ------------------------------------------------------------------ entry points: validate -> run loop -> result

    def execute(self, context: Context) -> Any:
        from airflow_gpu_sched.operators import race, reattach

        self.execution_deadline = running.execution_deadline(self, context)
        links.start_try(self)
        self.validated_job(context)  # bad input fails here, before any API call
        vertex_calls.hear_service(self)  # durations count in the service's time (vertex/service_clock.py)
        with run.vertex_reachable():
            ledger = self._ledger_of(context)
            if not ledger.durable:  # Airflow 3.1/3.2: a retry finds its earlier try's job by its labels
                reattach.adopt_earlier_job(self, context, ledger)
            started = events.try_started(self, context, ledger, race.found_members(self, ledger))
            return self._returned(run.run(self, context, ledger, *started))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with the job's event: the loop goes on from there."""
        self.execution_deadline = vertex_calls.resumed(self, context)
        links.start_try(self, resumed_with_job=True)
        with run.vertex_reachable():
            return self._returned(run.run(self, context, self._ledger_of(context),
                                          *events.job_event(self, context, event)))

    def execute_race(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with a race's event (operators/race.py)."""
        self.execution_deadline = vertex_calls.resumed(self, context)
        from airflow_gpu_sched.operators import race

        links.start_try(self, resumed_with_job=True)
        with run.vertex_reachable():
            self.run_ledger = ledger = self._ledger_of(context)
            return self._returned(run.run(self, context, ledger, *race.race_event(self, context, event)))

    def execute_capacity(self, context: Context, event: dict[str, Any]) -> Any:
        """Back from the triggerer with the persistent resource's event."""
        self.execution_deadline = vertex_calls.resumed(self, context)
        links.start_try(self)  # the pool's wait comes before the job: no links yet
        with run.vertex_reachable():
            return self._returned(run.run(self, context, self._ledger_of(context), events.capacity_event(event)))

    def _returned(self, result: Any) -> Any:
        """The result Airflow pushes as ``return_value`` when execute returns (the model link reads it)."""
        if result is not None:
            links.wrote(self, "return_value")
        return result

    def _ledger_of(self, context: Context) -> SubmissionLedger:  # with this run's region order
        ledger = SubmissionLedger.from_context(context, events.first_try(self, context))
        region_order.apply(self, ledger, context)  # observed/cheapest orders, learned waits: kept in the ledger
        return ledger

    # ------------------------------------------------------------------ the waits (deferred, or in this process)

    def wait_for_job(self, context: Context, job_name: str) -> dict[str, Any]:
        """Wait for the job: its event, under the ledger's bound on its time before RUNNING."""
        self.running_job = job_name
        ledger = self.run_ledger if self.run_ledger is not None else SubmissionLedger.from_context(context)
        return self.wait_on(waits.job_trigger(self, ledger, job_name), "execute_complete")

    def wait_for_capacity(self, context: Context, resource_name: str, job_spec_json: dict[str, Any],
                          wait: timedelta | None) -> dict[str, Any]:
        """Wait for free replicas on the persistent resource."""
        return self.wait_on(waits.capacity_trigger(self, resource_name, job_spec_json, wait), "execute_capacity")

    def wait_on(self, trigger: BaseTrigger, method_name: str) -> dict[str, Any]:
        """Defer to ``trigger`` (back through ``method_name``), or run it here until its first event."""
        if self.deferrable:  # under execution_timeout's deadline, which Airflow 3 leaves to the deferral
            self.defer(trigger=trigger, method_name=method_name,
                       timeout=running.deferral_timeout(self.execution_deadline))
        return first_event(trigger)

    # ------------------------------------------------------------------ lineage, kill

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (the provider's listener calls it): inputs, outputs, ``gpuTraining`` facet."""
        return lineage.facets_on_complete(self, task_instance)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow resumes a try whose deferral timed out (``execution_timeout``) only to fail it
        (``__fail__``), and its trigger was cancelled without ``on_kill``: the try stops here like a
        killed one (its waiting jobs cancelled, the cancels recorded as ours), then fails as Airflow says."""
        if next_method == AIRFLOW_FAIL_METHOD:
            from airflow_gpu_sched.operators.kill import kill_after_deferral_timeout

            kill_after_deferral_timeout(self, self._ledger_of(context))
        return super().resume_execution(next_method, next_kwargs, context)

    def on_kill(self) -> None:
        """The try is told to stop: it creates no job and moves no plan from here, and its job (a
        race: every member) is cancelled, the cancel recorded as ours (:mod:`.kill`)."""
        from airflow_gpu_sched.operators.kill import kill

        kill(self)


class GpuTrainingOperator(VertexTrainingOperator):
    """Train under an explicit capacity plan: ``plan=[step, ...]`` (typed steps or dicts, see
    :mod:`airflow_gpu_sched.orchestration.plans`), tried in order on capacity outcomes; or the
    plan as JSON/YAML text, a ``.json``/``.yaml`` file, or a template of the whole plan
    (``"{{ var.value.gpu_plan }}"``), checked once read or rendered, before any call."""

    def __init__(self, *, plan: list[Step | dict[str, Any]] | str, **kwargs: Any) -> None:
        super().__init__(plan=plan, **kwargs)
