"""The three kinds of Vertex AI training the operators submit, and only what differs between them.

The operators build one CustomJob (its ``jobSpec``: pools, strategy, timeout, output dir) for
every job type. A :class:`JobType` then says

- what is sent: the CustomJob itself, a HyperparameterTuningJob whose ``trialJobSpec`` is that
  spec, or a TrainingPipeline whose custom-task inputs are that spec;
- where: the collection (``customJobs``, ``hyperparameterTuningJobs``, ``trainingPipelines``),
  which also makes a resource name say its own type (:func:`job_type_of`);
- how its state reads as a CustomJob's (:meth:`JobType.view`), so waiting, classifying a
  failure, recovery, idempotency, cancellation and accounting are the one code path of the
  operators, triggers and shared poller;
- which custom job holds its GPUs (:meth:`JobType.capacity_job`): a pipeline or a tuning job
  says RUNNING before that job runs (a pipeline: observed), so "got capacity" is that job's
  RUNNING, read by the watchers while the owner says RUNNING and no RUNNING was seen yet;
- what the task returns besides the common keys (:meth:`JobType.outputs`).

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu_sched.vertex.console import console_root
from airflow_gpu_sched.orchestration import state_times
from airflow_gpu_sched.orchestration.event_fields import public_resource
from airflow_gpu_sched.orchestration.outcomes import event_for_job
from airflow_gpu_sched.vertex import resource_names
from airflow_gpu_sched.vertex.enums import TERMINAL_JOB_STATE_NAMES, TERMINAL_PIPELINE_STATE_NAMES, JobState
from airflow_gpu_sched.vertex.models import CUSTOM_TASK_DEFINITION, CustomJob, CustomJobSpec, VertexModel
from airflow_gpu_sched.vertex.rules import Violation


@dataclass(frozen=True)
class JobOptions:
    """The type-specific arguments of an operator (JSON-safe once rendered)."""

    study_spec: Any = None  # REST JSON dict or a StudySpec model
    max_trial_count: int | None = None
    parallel_trial_count: int | None = None
    max_failed_trial_count: int | None = None
    model_display_name: str | None = None
    model_serving_image_uri: str | None = None
    parent_model: str | None = None
    given: frozenset[str] = field(default=frozenset())  # which of them the user set

    @classmethod
    def of(cls, **values: Any) -> JobOptions:
        return cls(**values, given=frozenset(k for k, v in values.items() if v is not None))


TUNING_OPTIONS = ("study_spec", "max_trial_count", "parallel_trial_count", "max_failed_trial_count")
PIPELINE_OPTIONS = ("model_display_name", "model_serving_image_uri", "parent_model")


# What the shared poller reads from every listed resource (its ``readMask``, FieldMask JSON paths):
# the triggers' state lines and change detection, and the poller's create_time bounds.
WATCH_FIELDS = ("name", "state", "createTime", "startTime", "endTime", "updateTime", "error", "labels")


class JobType:
    """A custom job: the spec as built. The base of the other two."""

    key = "custom_job"  # the operator's ``job_type`` and the client methods' stem
    collection = "customJobs"
    page_items = "custom_jobs"  # the list response's field
    terminal_states: tuple[str, ...] = TERMINAL_JOB_STATE_NAMES
    options: tuple[str, ...] = ()
    output_keys: tuple[str, ...] = ()
    # what view(), outputs() and the accounting read from a finished resource besides WATCH_FIELDS
    # (the GPUs per pool for gpu_hours, the accelerator): the mask of a list of ended jobs
    final_fields: tuple[str, ...] = ("displayName", "jobSpec.workerPoolSpecs")

    def violations(self, options: JobOptions) -> list[Violation]:
        """Type-specific arguments given to the wrong type, and the type's own rules."""
        foreign = sorted(options.given - set(self.options))
        return [Violation(name, f"applies to job_type {_owner(name)!r} only (this task's job_type is "
                                f"{self.key!r})") for name in foreign]

    def body(self, job: CustomJob, options: JobOptions) -> Any:
        return job

    def parse(self, wire: Any) -> Any:
        return CustomJob.model_validate(wire)

    def view(self, resource: Any, capacity: CustomJob | None = None) -> CustomJob:
        return resource

    def needs_capacity_read(self, resource: Any, times: dict[str, Any] | None = None) -> bool:
        """Whether "got capacity" needs a read of another custom job (:meth:`capacity_job`): only
        while the resource says RUNNING and no poll saw it get capacity yet. A custom job: never."""
        return False

    def capacity_job(self, resource: Any, times: dict[str, Any] | None = None) -> str | None:
        """The custom job whose RUNNING is "got capacity" (None: the resource's own state tells)."""
        return None

    def outputs(self, resource: Any) -> dict[str, Any]:
        return {}

    def listed_without_details(self, resource: Any) -> bool:
        """True when ``resource`` came from a list page that leaves out what :meth:`outputs` reads."""
        return False

    def parallelism(self, options: JobOptions) -> int:
        """How many copies of the spec may hold GPUs at once (quota and persistent-pool fit)."""
        return 1

    def gpu_hours(self, resource: Any) -> float | None:
        """GPU-hours when the resource's own start/end times do not tell them (None: they do)."""
        return None

    def console_url(self, name: str) -> str:
        project, location, job_id = _parts(name)
        return (f"{console_root()}/vertex-ai/locations/{location}/training/{job_id}/cpu"
                f"?project={project}")

    # --- the client calls (the sync and async clients have the same method names)

    def create(self, client: Any, body: Any) -> Any:
        return getattr(client, f"create_{self.key}")(body)

    def get(self, client: Any, name: str) -> Any:
        return getattr(client, f"get_{self.key}")(name)

    def list_page(self, client: Any, filter: str, page_size: int, page_token: str | None,
                  read_mask: str | None = None) -> Any:
        return getattr(client, f"list_{self.key}s_page")(filter=filter, page_size=page_size, page_token=page_token,
                                                          read_mask=read_mask)

    def list_all(self, client: Any, filter: str, page_size: int = 100) -> Iterator[Any]:
        """Every resource matching ``filter`` (sync client), page after page until no token: a page
        may be short or empty and still carry one (AIP-158, google.aip.dev/158)."""
        token = None
        while True:
            page = self.list_page(client, filter, page_size, token)
            yield from self.items(page)
            if not (token := page.next_page_token):
                return

    def cancel(self, client: Any, name: str) -> Any:
        return getattr(client, f"cancel_{self.key}")(name)

    def items(self, page: Any) -> list[Any]:
        return getattr(page, self.page_items)

    def not_terminal_filter(self) -> str:
        # the proto's own example: "`NOT display_name="my_job"`" (ListCustomJobsRequest.filter,
        # v1 job_service.proto); NOT over a parenthesized OR: AIP-160's grammar (google.aip.dev/160)
        return "NOT " + self.terminal_filter()

    def terminal_filter(self) -> str:
        # "`state` supports `=`, `!=` comparisons" (ListCustomJobsRequest.filter, v1 job_service.proto;
        # ListTrainingPipelinesRequest.filter's example `state="PIPELINE_STATE_SUCCEEDED"`); the OR is
        # parenthesized because AIP-160 binds OR tighter than AND (google.aip.dev/160)
        return "(" + " OR ".join(f'state="{s}"' for s in self.terminal_states) + ")"

    def watch_mask(self) -> str:
        """readMask of the list of active jobs: nothing final is read from it."""
        return ",".join(WATCH_FIELDS)

    def final_mask(self) -> str:
        """readMask of a list of ended jobs: what the trigger's final event must carry."""
        return ",".join(WATCH_FIELDS + self.final_fields)

    def event(self, resource: Any, observed_restarts: int = 0, times: dict[str, Any] | None = None,
              ours: bool = False) -> dict[str, Any]:
        """The trigger event for a finished resource: the common payload, plus the resource itself
        when it is not a custom job (the operator reads its outputs from it). ``times``: the
        states the trigger saw; ``ours``: we cancelled it."""
        payload = event_for_job(self.view(resource), observed_restarts, times, ours)
        if self is not CUSTOM_JOB:
            payload["resource"] = public_resource(resource)
        return payload

    def resource_of(self, event: dict[str, Any]) -> Any:
        return self.parse(event.get("resource") or event["job"])


class HyperparameterTuningJobType(JobType):
    """Trials are custom jobs of ``trialJobSpec`` (the operator's spec, strategy included),
    ``parallelTrialCount`` at a time; a stockout in a trial fails the tuning job like a custom job."""

    key = "hyperparameter_tuning_job"
    collection = "hyperparameterTuningJobs"
    page_items = "hyperparameter_tuning_jobs"
    options = TUNING_OPTIONS
    output_keys = ("trials", "best_trial")
    # lists carry no trials whatever the mask: the operator GETs the whole job (listed_without_details)
    final_fields = ("displayName", "trialJobSpec.workerPoolSpecs", "studySpec")

    def violations(self, options: JobOptions) -> list[Violation]:
        from airflow_gpu_sched.vertex.job_type_rules import check_tuning_options

        return super().violations(options) + check_tuning_options(
            options.study_spec, options.max_trial_count, options.parallel_trial_count,
            options.max_failed_trial_count)

    def body(self, job: CustomJob, options: JobOptions) -> Any:
        from airflow_gpu_sched.vertex.job_type_models import HyperparameterTuningJob

        study = options.study_spec.to_api() if isinstance(options.study_spec, VertexModel) else options.study_spec
        wire: dict[str, Any] = {
            "displayName": job.display_name, "studySpec": study, "maxTrialCount": options.max_trial_count,
            "parallelTrialCount": options.parallel_trial_count or 1, "trialJobSpec": job.job_spec.to_api()}
        if options.max_failed_trial_count is not None:
            wire["maxFailedTrialCount"] = options.max_failed_trial_count
        if job.labels:
            wire["labels"] = dict(job.labels)
        return HyperparameterTuningJob.model_validate(wire)

    def parse(self, wire: Any) -> Any:
        from airflow_gpu_sched.vertex.job_type_models import HyperparameterTuningJob

        return HyperparameterTuningJob.model_validate(wire)

    def view(self, resource: Any, capacity: CustomJob | None = None) -> CustomJob:
        return _view(resource, resource.trial_job_spec or CustomJobSpec(), resource.state, capacity)

    def needs_capacity_read(self, resource: Any, times: dict[str, Any] | None = None) -> bool:
        return _needs_capacity_read(resource, times)

    def capacity_job(self, resource: Any, times: dict[str, Any] | None = None) -> str | None:
        """The first trial's custom job (a tuning job may say RUNNING once a trial is created:
        emulator variant ``tuningRunning``). A listed tuning job carries no trials: the caller
        GETs it first (:meth:`listed_without_details`)."""
        trials = sorted(resource.trials or [], key=lambda t: int(t.id) if str(t.id or "").isdigit() else 0)
        return trials[0].custom_job if trials else None

    def listed_without_details(self, resource: Any) -> bool:
        return resource.trials is None  # Vertex's list leaves the trials out (so does the emulator)

    def parallelism(self, options: JobOptions) -> int:
        return max(1, options.parallel_trial_count or 1)

    def gpu_hours(self, resource: Any) -> float | None:
        """Trials run side by side: the sum of each trial's run time x the GPUs of one trial."""
        seconds = sum((t.end_time - t.start_time).total_seconds() for t in (resource.trials or [])
                      if t.start_time and t.end_time)
        return round((resource.trial_job_spec or CustomJobSpec()).accelerators_held() * seconds / 3600.0, 4)

    def outputs(self, resource: Any) -> dict[str, Any]:
        trials = [_trial_record(t) for t in resource.trials or []]
        return {"trials": trials, "best_trial": _best(trials, resource.study_spec)}

    def console_url(self, name: str) -> str:
        project, location, job_id = _parts(name)
        return (f"{console_root()}/vertex-ai/locations/{location}/training/{job_id}/trials"
                f"?project={project}")


class TrainingPipelineType(JobType):
    """One custom job (the custom-task definition, inputs shaped like a CustomJobSpec), then the
    model in ``modelToUpload`` is registered (a new version of ``parent_model`` when given)."""

    key = "training_pipeline"
    collection = "trainingPipelines"
    page_items = "training_pipelines"
    terminal_states = TERMINAL_PIPELINE_STATE_NAMES
    options = PIPELINE_OPTIONS
    output_keys = ("model_name", "model_version")
    final_fields = ("displayName", "trainingTaskInputs", "modelToUpload", "modelId")

    def violations(self, options: JobOptions) -> list[Violation]:
        from airflow_gpu_sched.vertex.job_type_rules import check_pipeline_options

        return super().violations(options) + check_pipeline_options(
            options.model_display_name, options.model_serving_image_uri, options.parent_model)

    def body(self, job: CustomJob, options: JobOptions) -> Any:
        from airflow_gpu_sched.vertex.job_type_models import TrainingPipeline

        model: dict[str, Any] = {"displayName": options.model_display_name,
                                 "containerSpec": {"imageUri": options.model_serving_image_uri}}
        wire: dict[str, Any] = {"displayName": job.display_name, "trainingTaskDefinition": CUSTOM_TASK_DEFINITION,
                                "trainingTaskInputs": job.job_spec.to_api(), "modelToUpload": model}
        if options.parent_model:
            wire["parentModel"] = options.parent_model
        if job.labels:
            wire["labels"] = dict(job.labels)
            model["labels"] = dict(job.labels)
        return TrainingPipeline.model_validate(wire)

    def parse(self, wire: Any) -> Any:
        from airflow_gpu_sched.vertex.job_type_models import TrainingPipeline

        return TrainingPipeline.model_validate(wire)

    def view(self, resource: Any, capacity: CustomJob | None = None) -> CustomJob:
        spec = CustomJobSpec.model_validate(resource.training_task_inputs or {})
        state = resource.state.as_job_state() if resource.state is not None else None
        return _view(resource, spec, state, capacity)

    def capacity_job(self, resource: Any, times: dict[str, Any] | None = None) -> str | None:
        """The backing custom job (``trainingTaskMetadata.backingCustomJob``): a pipeline is
        RUNNING minutes before its job has GPUs (observed, docs/fidelity.md)."""
        return resource.backing_custom_job

    def needs_capacity_read(self, resource: Any, times: dict[str, Any] | None = None) -> bool:
        return _needs_capacity_read(resource, times)

    def watch_mask(self) -> str:
        """The active list names each pipeline's backing job too (read for "got capacity")."""
        return ",".join((*WATCH_FIELDS, "trainingTaskMetadata"))

    def outputs(self, resource: Any) -> dict[str, Any]:
        model = resource.model_to_upload
        name = model.name if model is not None and model.name else None
        if name is None and resource.model_id:
            project, location, _ = _parts(resource.name)
            name = f"projects/{project}/locations/{location}/models/{resource.model_id}"
        return {"model_name": name.split("@")[0] if name else None,
                "model_version": model.version_id if model is not None else None}

    def console_url(self, name: str) -> str:
        project, location, job_id = _parts(name)
        return (f"{console_root()}/vertex-ai/locations/{location}/training/{job_id}"
                f"?project={project}")


CUSTOM_JOB = JobType()
HYPERPARAMETER_TUNING_JOB = HyperparameterTuningJobType()
TRAINING_PIPELINE = TrainingPipelineType()
JOB_TYPES: dict[str, JobType] = {t.key: t for t in (CUSTOM_JOB, HYPERPARAMETER_TUNING_JOB, TRAINING_PIPELINE)}
_BY_COLLECTION = {t.collection: t for t in JOB_TYPES.values()}


def get_job_type(key: str) -> JobType:
    try:
        return JOB_TYPES[key]
    except KeyError:
        raise ValueError(f"must be one of {', '.join(repr(k) for k in JOB_TYPES)} (got {key!r})") from None


def job_type_of(resource_name: str) -> JobType:
    """``projects/P/locations/L/{collection}/ID`` names its own type."""
    _, _, collection, _ = resource_names.parts(resource_name, "training resource name")
    if collection not in _BY_COLLECTION:
        raise ValueError(f"not a training resource name: {resource_name!r}")
    return _BY_COLLECTION[collection]


def _owner(option: str) -> str:
    return HYPERPARAMETER_TUNING_JOB.key if option in TUNING_OPTIONS else TRAINING_PIPELINE.key


def _parts(name: str) -> tuple[str, str, str]:
    project, location, _, job_id = resource_names.parts(name, "training resource name")
    return project, location, job_id


def _needs_capacity_read(resource: Any, times: dict[str, Any] | None) -> bool:
    state = resource.state.as_job_state() if hasattr(resource.state, "as_job_state") else resource.state
    return state is JobState.JOB_STATE_RUNNING and not state_times.seen_running(times)


def _view(resource: Any, spec: CustomJobSpec, state: JobState | None, capacity: CustomJob | None = None) -> CustomJob:
    """The resource as a CustomJob; ``capacity``: the custom job holding its GPUs, as read now,
    whose state the view shows while the resource says RUNNING (state_times.capacity_state)."""
    shown = state_times.capacity_state(state, capacity.state if capacity is not None else None)
    update = resource.update_time
    if capacity is not None and state is JobState.JOB_STATE_RUNNING and capacity.update_time is not None:
        update = max(update, capacity.update_time) if update is not None else capacity.update_time  # its job's change
    return CustomJob(name=resource.name, display_name=resource.display_name, job_spec=spec, state=shown,
                     create_time=resource.create_time, start_time=resource.start_time,
                     end_time=resource.end_time, update_time=update, error=resource.error,
                     labels=resource.labels)


def _trial_record(trial: Any) -> dict[str, Any]:
    measurement = trial.final_measurement
    return {
        "id": trial.id,
        "state": trial.state.value if trial.state else None,
        "parameters": {p.parameter_id: p.value for p in trial.parameters or []},
        "final_measurement": {m.metric_id: m.value for m in (measurement.metrics or [])} if measurement else None,
        "custom_job": trial.custom_job,
    }


def _best(trials: list[dict[str, Any]], study_spec: Any) -> dict[str, Any] | None:
    """The succeeded trial with the best value of the study's first metric, by its goal."""
    metrics = study_spec.metrics if study_spec is not None else None
    if not metrics:
        return None
    metric, goal = metrics[0].metric_id, str(getattr(metrics[0].goal, "value", metrics[0].goal))
    scored = [t for t in trials if t["state"] == "SUCCEEDED" and (t["final_measurement"] or {}).get(metric)
              is not None]
    if not scored:
        return None
    pick = min if goal == "MINIMIZE" else max
    return pick(scored, key=lambda t: t["final_measurement"][metric])
