"""Hyperparameter tuning jobs, training pipelines and models in the emulator.

Both job types run *real* custom jobs of the backend (``JobRecord.owner`` names the tuning job
or pipeline), so FLEX_START queueing, SPOT preemption and restarts, persistent resources,
capacity and quota apply to them unchanged; every state change of such a custom job calls
:meth:`JobTypesMixin._child_changed`, at its own emulated time.

Tuning job (``hyperparameterTuningJobs``), the emulator's choices marked *:
    create -> answers JOB_STATE_PENDING with no trials, then JOB_STATE_QUEUED with no trials
        (both recorded) for ``queueSeconds``*, then JOB_STATE_PENDING* with ``parallelTrialCount``
        trials started at once (recorded: PENDING -> QUEUED -> PENDING); each trial
        is a custom job ``<display name>-trial-<n>`` with the ``trialJobSpec`` (scheduling, labels
        included) and ``--<parameterId>=<value>`` appended to every pool's args
    first trial job RUNNING -> JOB_STATE_RUNNING (startTime)
    a trial job ends -> the trial SUCCEEDED (finalMeasurement from ``studies.metric_values``) or
        INFEASIBLE (infeasibleReason: the job's error); the next trial starts, until
        ``maxTrialCount`` trials were started
    failed trials reach ``maxFailedTrialCount`` (> 0) -> JOB_STATE_FAILED at once, running
        trials cancelled; the error mirrors the failed trial's (same code and details, e.g.
        ErrorInfo reason STOCKOUT; message prefixed by the trial's message)
    all trials done -> JOB_STATE_SUCCEEDED if at least one trial succeeded, else FAILED
        (``maxFailedTrialCount`` 0* = "the service decides": fail only when every trial failed)
    cancel -> JOB_STATE_CANCELLING, trial jobs cancelled (trials STOPPING) -> JOB_STATE_CANCELLED
        (error code 1) when the last one has stopped
    quota*, per trial: refused at create (429) when one trial alone needs more than a limit;
        otherwise each trial's job waits QUEUED for quota like any custom job, so parallel
        trials beyond the free quota wait their turn (the tuning job stays PENDING until one runs)
Training pipeline (``trainingPipelines``, custom task only): one custom job from
    ``trainingTaskInputs`` (``trainingTaskMetadata.backingCustomJob``); PIPELINE_STATE_PENDING*
    until it runs, RUNNING while it runs; when it succeeds the model is registered
    (``models/{modelId or a numeric id}`` version 1, or the next version of ``parentModel``) and
    the pipeline is SUCCEEDED with ``modelToUpload`` holding the registered version; the job's
    failure or cancellation fails or cancels the pipeline with the same error.
    GPU quota: a pipeline is never refused at create (observed: GoogleCloudPlatform/
    vertex-ai-samples#700, "Training failed with: code: 8 message: "The following quota metrics
    exceed quota limits: ..."). When its custom job alone would exceed a limit, no job is made
    and after ``queueSeconds``* the pipeline is FAILED, error code 8 and Google's quota message;
    a job that fits waits QUEUED for quota (the pipeline PENDING) like any custom job.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from airflow_gpu_sched.emulator import studies
from airflow_gpu_sched.emulator.api_errors import ApiError, cancel_failure, violations_error
from airflow_gpu_sched.emulator.paging import coerce_page_size, encode_token, offset_page
from airflow_gpu_sched.emulator.capacity import tier_of
from airflow_gpu_sched.emulator.defaults import fill_server_defaults
from airflow_gpu_sched.vertex.job_type_models import (
    HyperparameterTuningJob,
    Measurement,
    MeasurementMetric,
    Model,
    TrainingPipeline,
    Trial,
    TrialParameter,
)
from airflow_gpu_sched.vertex.models import RPC_STATUS, CustomJob, JobState, PipelineState, Status, TrialState
from airflow_gpu_sched.vertex.rules import Violation, check_training_pipeline, check_tuning_job, parse_violations

# Recorded real traffic: startTime is set ~130-150 ms after createTime, at admission, while the
# job is still PENDING/QUEUED (variant startTime: admission, the default; docs/fidelity.md).
ADMISSION_START = timedelta(seconds=0.14)

if TYPE_CHECKING:
    from airflow_gpu_sched.emulator.backend import JobRecord

S, P = JobState, PipelineState
STEP_COUNT = 100  # the final measurement's stepCount


@dataclass
class TuningRecord:
    job: HyperparameterTuningJob
    project: str
    location: str
    seq: int
    trial_jobs: dict[str, int] = field(default_factory=dict)  # custom job name -> index in job.trials
    failed: int = 0
    history: list[tuple[str, datetime]] = field(default_factory=list)

    def wire(self) -> dict:
        return self.job.to_api()

    def list_wire(self) -> dict:
        body = self.job.to_api()
        body.pop("trials", None)  # lists carry no trials (as Vertex's do)
        return body

    def filter_record(self) -> dict:
        return {"display_name": self.job.display_name, "state": self.job.state.value,  # type: ignore[union-attr]
                "create_time": self.job.create_time, "labels": self.job.labels or {}}


@dataclass
class PipelineRecord:
    pipeline: TrainingPipeline
    project: str
    location: str
    seq: int
    job_name: str | None  # the backing custom job (None: refused for quota, never made)
    history: list[tuple[str, datetime]] = field(default_factory=list)
    refusal: str | None = None  # the quota message it fails with (no backing job)

    def wire(self) -> dict:
        return self.pipeline.to_api()

    def filter_record(self) -> dict:
        p = self.pipeline
        return {"display_name": p.display_name, "state": p.state.value,  # type: ignore[union-attr]
                "create_time": p.create_time, "labels": p.labels or {},
                "training_task_definition": p.training_task_definition or ""}


@dataclass
class ModelRecord:
    name: str  # projects/P/locations/L/models/ID
    project: str
    location: str
    seq: int
    versions: list[Model] = field(default_factory=list)

    def default(self) -> Model:
        return next((v for v in self.versions if "default" in (v.version_aliases or [])), self.versions[-1])

    def wire(self) -> dict:
        return self.default().to_api()

    def filter_record(self) -> dict:
        model = self.default()
        # base_model_name: the emulator registers no model from a base model (assumed: always "")
        return {"model": self.name.rsplit("/", 1)[-1], "display_name": model.display_name,
                "labels": model.labels or {}, "base_model_name": ""}


class _RegistrationFailed(Exception):
    def __init__(self, status: Status):
        self.status = status


class JobTypesMixin:
    """Mixed into :class:`~airflow_gpu_sched.emulator.backend.Backend`."""

    # provided by Backend
    jobs: dict[str, JobRecord]
    stats: dict[str, Any]

    def reset_job_types(self) -> None:
        self.tuning_jobs: dict[str, TuningRecord] = {}
        self.pipelines: dict[str, PipelineRecord] = {}
        self.models: dict[str, ModelRecord] = {}

    # ------------------------------------------------------------------ shared

    def _parse(self, cls: Any, body: dict) -> Any:
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            raise violations_error(parse_violations(exc)) from None

    def _child_changed(self, record: JobRecord, when: datetime) -> None:
        tuning = self.tuning_jobs.get(record.owner or "")
        if tuning is not None:
            self._trial_changed(tuning, record, when)
            return
        pipeline = self.pipelines.get(record.owner or "")
        if pipeline is not None:
            self._pipeline_job_changed(pipeline, record, when)

    # ------------------------------------------------------------------ hyperparameter tuning jobs

    def create_hyperparameter_tuning_job(self, project: str, location: str, body: dict) -> dict:
        job = self._parse(HyperparameterTuningJob, body)
        found = check_tuning_job(job)
        if found:
            raise violations_error(found)
        now = self.clock.now()
        spec = job.trial_job_spec
        if spec.persistent_resource_id:
            self._persistent_demand(project, location, CustomJob(job_spec=spec))  # raises when it cannot fit
        else:  # per trial: parallel trials beyond the free quota wait QUEUED (assumed)
            demand = {a.value: n for a, n in spec.accelerator_demand().items()}
            self._check_quota(location, tier_of(spec.strategy), demand)
        name = f"projects/{project}/locations/{location}/hyperparameterTuningJobs/{next(self._ids)}"
        job = job.model_copy(update={
            "name": name, "state": S.JOB_STATE_PENDING, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None,
            "trials": None,  # proto3 JSON leaves out an empty list (recorded: no "trials" key)
            "trial_job_spec": fill_server_defaults(spec),  # recorded: diskSpec filled in
        })
        record = TuningRecord(job, project, location, next(self._seq), history=[(S.JOB_STATE_PENDING.value, now)])
        self.tuning_jobs[name] = record
        self.stats["hyperparameterTuningJobsCreated"] = self.stats.get("hyperparameterTuningJobsCreated", 0) + 1
        answer = record.wire()  # recorded: PENDING, no trials, no startTime
        # recorded: then QUEUED with no trials; the trials start after queueSeconds (PENDING again)
        self._tuning_state(record, S.JOB_STATE_QUEUED, now)
        self._schedule(now + timedelta(seconds=self.scenario.queue_seconds), "tuning_admitted", name)
        if self.scenario.variants.start_time == "admission" and record.job.start_time is None:
            record.job.start_time = now + ADMISSION_START  # recorded: set at admission
        return answer

    def _tuning(self, name: str) -> TuningRecord:
        record = self.tuning_jobs.get(name)
        if record is None:
            raise ApiError("NOT_FOUND", "The HyperparameterTuningJob does not exist.")  # recorded: no name
        return record

    def get_hyperparameter_tuning_job(self, name: str) -> dict:
        return self._tuning(name).wire()

    def list_hyperparameter_tuning_jobs(self, project: str, location: str, filter_text: str = "",
                                        page_size: int | None = None, page_token: str = "",
                                        read_mask: str = "") -> dict:
        return self._list_page(self.tuning_jobs.values(), "hyperparameterTuningJobs", project, location,
                               filter_text, page_size, page_token, wire=TuningRecord.list_wire, read_mask=read_mask)

    def cancel_hyperparameter_tuning_job(self, name: str) -> dict:
        record = self._tuning(name)
        state = record.job.state
        if state.is_terminal() and self.scenario.variants.cancel_ended == "noop":  # type: ignore[union-attr]
            return {}
        if state.is_terminal():  # type: ignore[union-attr]
            raise ApiError("FAILED_PRECONDITION", f"Cannot cancel HyperparameterTuningJob {name}: "
                                                           f"it is already in state {state.value}.")  # type: ignore[union-attr]
        if state is not S.JOB_STATE_CANCELLING:
            now = self.clock.now()
            self._tuning_state(record, S.JOB_STATE_CANCELLING, now)
            if record.trial_jobs:
                self._stop_trials(record, now)
                self._tuning_progress(record, now)
            else:  # no trial to stop; recorded: still CANCELLED only seconds later (cancelSeconds)
                self._schedule(now + timedelta(seconds=self.scenario.cancel_seconds), "tuning_cancelled", name)
        return {}

    def delete_hyperparameter_tuning_job(self, name: str) -> dict:
        record = self._tuning(name)
        if not record.job.state.is_terminal():  # type: ignore[union-attr]
            raise ApiError("FAILED_PRECONDITION",
                                    f"HyperparameterTuningJob {name} is in state {record.job.state.value}; "  # type: ignore[union-attr]
                                    "cancel it and wait for it to end before deleting it.")
        del self.tuning_jobs[name]
        return self._done_operation(record.project, record.location, "DeleteOperationMetadata")

    def _tuning_event(self, kind: str, name: str, when: datetime) -> None:
        record = self.tuning_jobs.get(name)
        if record is None:
            return
        if kind == "tuning_admitted" and record.job.state is S.JOB_STATE_QUEUED:
            self._tuning_state(record, S.JOB_STATE_PENDING, when)
            self._tuning_progress(record, when)
        elif kind == "tuning_cancelled" and record.job.state is S.JOB_STATE_CANCELLING:
            record.job.error = Status(code=1, message="CANCELED")
            self._tuning_state(record, S.JOB_STATE_CANCELLED, when)

    def _tuning_state(self, record: TuningRecord, state: JobState, when: datetime) -> None:
        record.job.state = state
        record.job.update_time = when
        record.history.append((state.value, when))
        if state is S.JOB_STATE_RUNNING and record.job.start_time is None:
            record.job.start_time = when
        if state.is_terminal():
            record.job.end_time = when

    def _spawn_trial(self, record: TuningRecord, when: datetime) -> None:
        job = record.job
        number = len(job.trials or []) + 1
        values = studies.suggest(job.study_spec, self.scenario.seed, job.job_id or "", number)
        spec = job.trial_job_spec.model_copy(deep=True)
        flags = [f"--{k}={v}" for k, v in values.items()]
        for _, pool in spec.active_pools():
            task = pool.container_spec or pool.python_package_spec
            if task is not None:
                task.args = list(task.args or []) + flags
        suffix = f"-trial-{number}"
        display = (job.display_name or "")[: 128 - len(suffix)] + suffix
        child = self._new_job(record.project, record.location,
                              CustomJob(display_name=display, job_spec=spec, labels=copy.deepcopy(job.labels)),
                              when, owner=job.name, check_quota=False)
        trial = Trial(id=str(number), state=TrialState.ACTIVE, start_time=when, custom_job=child.job.name,
                      parameters=[TrialParameter(parameter_id=k, value=v) for k, v in values.items()])
        job.trials = [*(job.trials or []), trial]
        record.trial_jobs[child.job.name] = number - 1
        job.update_time = when

    def _stop_trials(self, record: TuningRecord, when: datetime) -> None:
        for name in list(record.trial_jobs):
            child = self.jobs.get(name)
            if child is not None and not child.state.is_terminal():
                self._cancel_job(child, when)

    def _trial_changed(self, record: TuningRecord, child: JobRecord, when: datetime) -> None:
        index = record.trial_jobs.get(child.job.name)
        if index is None:
            return
        job, trial = record.job, (record.job.trials or [])[index]
        state = child.state
        job.update_time = when
        if state is S.JOB_STATE_RUNNING and job.state is S.JOB_STATE_PENDING:
            self._tuning_state(record, S.JOB_STATE_RUNNING, when)
        elif state is S.JOB_STATE_CANCELLING:
            trial.state = TrialState.STOPPING
        elif state.is_terminal():
            trial.end_time = when
            if state is S.JOB_STATE_SUCCEEDED:
                trial.state = TrialState.SUCCEEDED
                values = studies.metric_values(job.study_spec, trial.parameter_values)
                trial.final_measurement = Measurement(
                    step_count=STEP_COUNT, elapsed_duration=timedelta(seconds=child.progress),
                    metrics=[MeasurementMetric(metric_id=k, value=v) for k, v in values.items()])
            else:
                trial.state = TrialState.INFEASIBLE
                error = child.job.error or Status(code=2, message="The trial's custom job ended.")
                trial.infeasible_reason = error.message
                if not (job.state.is_terminal() or job.state is S.JOB_STATE_CANCELLING):  # type: ignore[union-attr]
                    record.failed += 1
                    limit = job.max_failed_trial_count or 0
                    if limit and record.failed >= limit:
                        self._fail_tuning(record, trial, error, when)
                        return
            self._tuning_progress(record, when)

    def _fail_tuning(self, record: TuningRecord, trial: Trial, error: Status, when: datetime) -> None:
        job = record.job
        job.error = Status(code=error.code, details=copy.deepcopy(error.details), message=(
            f"{error.message} (trial {trial.id} of HyperparameterTuningJob {job.name}; "
            f"{record.failed} of {job.max_trial_count} trial(s) failed)"))
        self._tuning_state(record, S.JOB_STATE_FAILED, when)
        self._stop_trials(record, when)

    def _tuning_progress(self, record: TuningRecord, when: datetime) -> None:
        job = record.job
        if job.state.is_terminal():  # type: ignore[union-attr]
            return
        trials = job.trials or []
        active = sum(1 for t in trials if not t.state.is_terminal())  # type: ignore[union-attr]
        if job.state is S.JOB_STATE_QUEUED:  # not admitted yet: no trials
            return
        if job.state is S.JOB_STATE_CANCELLING:
            if active == 0:  # as the scenario's cancelOutcome says, if it ran (as a custom job)
                ran = len(record.history) >= 2 and record.history[-2][0] == S.JOB_STATE_RUNNING.value
                outcome = self.scenario.variants.cancel_outcome if ran else "cancelled"
                if outcome == "succeeded":
                    self._tuning_state(record, S.JOB_STATE_SUCCEEDED, when)
                elif outcome == "failed":
                    job.error = cancel_failure()
                    self._tuning_state(record, S.JOB_STATE_FAILED, when)
                else:
                    job.error = Status(code=1, message="CANCELED")
                    self._tuning_state(record, S.JOB_STATE_CANCELLED, when)
            return
        while len(job.trials or []) < (job.max_trial_count or 0) and active < (job.parallel_trial_count or 1):
            self._spawn_trial(record, when)
            active += 1
        if active == 0 and len(job.trials or []) >= (job.max_trial_count or 0):
            if any(t.state is TrialState.SUCCEEDED for t in trials):
                self._tuning_state(record, S.JOB_STATE_SUCCEEDED, when)
            else:
                last = max((t for t in trials), key=lambda t: (t.end_time or when, int(t.id or 0)))
                child = self.jobs.get(last.custom_job or "")
                error = (child.job.error if child is not None else None) or Status(code=2, message="Every trial failed.")
                self._fail_tuning(record, last, error, when)

    # ------------------------------------------------------------------ training pipelines

    def create_training_pipeline(self, project: str, location: str, body: dict) -> dict:
        pipeline = self._parse(TrainingPipeline, body)
        found = check_training_pipeline(pipeline)
        if found:
            raise violations_error(found)
        models = f"projects/{project}/locations/{location}/models"
        if pipeline.parent_model is not None and pipeline.parent_model not in self.models:
            raise violations_error([Violation(
                "parentModel", f"model {pipeline.parent_model} does not exist (it must be in {models})")],
                status="FAILED_PRECONDITION")
        if pipeline.parent_model is None and pipeline.model_id and f"{models}/{pipeline.model_id}" in self.models:
            raise ApiError("ALREADY_EXISTS", f"Model {models}/{pipeline.model_id} already exists; "
                                                      "set parentModel to upload a new version of it.")
        now = self.clock.now()
        name = f"projects/{project}/locations/{location}/trainingPipelines/{next(self._ids)}"
        job = CustomJob(display_name=pipeline.display_name, job_spec=pipeline.custom_job_spec,
                        labels=copy.deepcopy(pipeline.labels))
        spec = pipeline.custom_job_spec
        refusal = None if spec.persistent_resource_id else self._quota_refusal(
            location, tier_of(spec.strategy), {a.value: n for a, n in spec.accelerator_demand().items()})
        child = None if refusal else self._new_job(project, location, job, now, owner=name, check_quota=False)
        model = pipeline.model_to_upload.model_copy(update={  # type: ignore[union-attr]
            "name": None, "version_id": None, "create_time": None, "update_time": None,
            "version_create_time": None, "version_update_time": None, "training_pipeline": None})
        pipeline = pipeline.model_copy(update={
            "name": name, "state": P.PIPELINE_STATE_PENDING, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None, "model_to_upload": model,
            "training_task_metadata": {"backingCustomJob": child.job.name} if child else None,
        })
        record = PipelineRecord(pipeline, project, location, next(self._seq), child.job.name if child else None,
                                history=[(P.PIPELINE_STATE_PENDING.value, now)], refusal=refusal)
        self.pipelines[name] = record
        if refusal:  # the service tries to make its custom job, which the quota refuses
            self._schedule(now + timedelta(seconds=self.scenario.queue_seconds), "pipeline_refused", name)
        self.stats["trainingPipelinesCreated"] = self.stats.get("trainingPipelinesCreated", 0) + 1
        answer = record.wire()
        if self.scenario.variants.start_time == "admission":  # assumed as for custom/tuning jobs
            pipeline.start_time = now + ADMISSION_START
        return answer

    def _pipeline(self, name: str) -> PipelineRecord:
        record = self.pipelines.get(name)
        if record is None:
            raise ApiError("NOT_FOUND", f'The TrainingPipeline "{name}" does not exist.')
        return record

    def get_training_pipeline(self, name: str) -> dict:
        return self._pipeline(name).wire()

    def list_training_pipelines(self, project: str, location: str, filter_text: str = "",
                                page_size: int | None = None, page_token: str = "", read_mask: str = "") -> dict:
        return self._list_page(self.pipelines.values(), "trainingPipelines", project, location, filter_text,
                               page_size, page_token, read_mask=read_mask)

    def cancel_training_pipeline(self, name: str) -> dict:
        record = self._pipeline(name)
        state = record.pipeline.state
        if state.is_terminal() and self.scenario.variants.cancel_ended == "noop":  # type: ignore[union-attr]
            return {}
        if state.is_terminal():  # type: ignore[union-attr]
            raise ApiError("FAILED_PRECONDITION", f"Cannot cancel TrainingPipeline {name}: "
                                                           f"it is already in state {state.value}.")  # type: ignore[union-attr]
        if state is not P.PIPELINE_STATE_CANCELLING:
            now = self.clock.now()
            self._pipeline_state(record, P.PIPELINE_STATE_CANCELLING, now)
            child = self.jobs.get(record.job_name or "")
            if child is not None:
                self._cancel_job(child, now)
            else:  # no job to stop (refused for quota): cancelled at once
                self._pipeline_state(record, P.PIPELINE_STATE_CANCELLED, now, Status(code=1, message="CANCELED"))
        return {}

    def _pipeline_refused(self, name: str, when: datetime) -> None:
        record = self.pipelines.get(name)
        if record is None or record.refusal is None or record.pipeline.state.is_terminal():  # type: ignore[union-attr]
            return
        code = RPC_STATUS["RESOURCE_EXHAUSTED"][0]  # 8, as in vertex-ai-samples#700
        self._pipeline_state(record, P.PIPELINE_STATE_FAILED, when, Status(code=code, message=record.refusal))

    def delete_training_pipeline(self, name: str) -> dict:
        record = self._pipeline(name)
        if not record.pipeline.state.is_terminal():  # type: ignore[union-attr]
            raise ApiError("FAILED_PRECONDITION",
                                    f"TrainingPipeline {name} is in state {record.pipeline.state.value}; "  # type: ignore[union-attr]
                                    "cancel it and wait for it to end before deleting it.")
        del self.pipelines[name]
        return self._done_operation(record.project, record.location, "DeleteOperationMetadata")

    def _pipeline_state(self, record: PipelineRecord, state: PipelineState, when: datetime,
                        error: Status | None = None) -> None:
        pipeline = record.pipeline
        pipeline.state = state
        pipeline.update_time = when
        record.history.append((state.value, when))
        if state is P.PIPELINE_STATE_RUNNING and pipeline.start_time is None:
            pipeline.start_time = when
        if state.is_terminal():
            pipeline.end_time = when
            pipeline.error = error

    def _pipeline_job_changed(self, record: PipelineRecord, child: JobRecord, when: datetime) -> None:
        pipeline, state = record.pipeline, child.state
        if pipeline.state.is_terminal():  # type: ignore[union-attr]
            return
        if state is S.JOB_STATE_RUNNING and pipeline.state is P.PIPELINE_STATE_PENDING:
            self._pipeline_state(record, P.PIPELINE_STATE_RUNNING, when)
        elif state is S.JOB_STATE_CANCELLING:
            self._pipeline_state(record, P.PIPELINE_STATE_CANCELLING, when)
        elif state is S.JOB_STATE_SUCCEEDED:
            try:
                pipeline.model_to_upload = self._register_model(record, when)
            except _RegistrationFailed as failed:
                self._pipeline_state(record, P.PIPELINE_STATE_FAILED, when, failed.status)
                return
            self._pipeline_state(record, P.PIPELINE_STATE_SUCCEEDED, when)
        elif state is S.JOB_STATE_CANCELLED:
            self._pipeline_state(record, P.PIPELINE_STATE_CANCELLED, when, Status(code=1, message="CANCELED"))
        elif state.is_terminal():
            self._pipeline_state(record, P.PIPELINE_STATE_FAILED, when,
                                 child.job.error or Status(code=2, message=f"{child.job.name} ended {state.value}."))

    # ------------------------------------------------------------------ models

    def _register_model(self, record: PipelineRecord, when: datetime) -> Model:
        pipeline = record.pipeline
        upload = pipeline.model_to_upload or Model()
        if pipeline.parent_model:
            base = pipeline.parent_model
            entry = self.models.get(base)
            if entry is None:
                raise _RegistrationFailed(Status(code=5, message=f"Parent model {base} does not exist."))
        else:
            base = f"projects/{record.project}/locations/{record.location}/models/{pipeline.model_id or next(self._ids)}"
            if base in self.models:
                raise _RegistrationFailed(Status(code=6, message=f"Model {base} already exists."))
            entry = ModelRecord(base, record.project, record.location, next(self._seq))
        aliases = ["default", *[a for a in upload.version_aliases or [] if a != "default"]]
        for older in entry.versions:
            older.version_aliases = [a for a in older.version_aliases or [] if a not in aliases] or None
        artifact = upload.artifact_uri
        output = pipeline.custom_job_spec.base_output_directory
        if artifact is None and output is not None and output.output_uri_prefix:
            artifact = output.output_uri_prefix.rstrip("/") + "/model"
        model = upload.model_copy(deep=True, update={
            "name": base, "version_id": str(len(entry.versions) + 1), "version_aliases": aliases,
            "artifact_uri": artifact, "create_time": entry.versions[0].create_time if entry.versions else when,
            "update_time": when, "version_create_time": when, "version_update_time": when,
            "training_pipeline": pipeline.name,
        })
        entry.versions.append(model)
        self.models[base] = entry
        self.stats["modelVersionsRegistered"] = self.stats.get("modelVersionsRegistered", 0) + 1
        return model.model_copy(deep=True)

    def get_model(self, name: str) -> dict:
        base, _, version = name.partition("@")
        entry = self.models.get(base)
        if entry is not None:
            if not version:
                return entry.wire()
            for model in entry.versions:
                if model.version_id == version or version in (model.version_aliases or []):
                    return model.to_api()
        raise ApiError("NOT_FOUND", f'The Model "{name}" does not exist.')

    def list_models(self, project: str, location: str, filter_text: str = "", page_size: int | None = None,
                    page_token: str = "", read_mask: str = "", order_by: str = "") -> dict:
        return self._list_page(self.models.values(), "models", project, location, filter_text, page_size,
                               page_token, read_mask=read_mask, order_by=order_by)

    # ------------------------------------------------------------------ Cloud Quotas

    def list_quota_infos(self, project: str, service: str, page_size: int | None = None,
                         page_token: str = "") -> dict:
        if self.quotas.deny:
            raise ApiError(
                "PERMISSION_DENIED",
                f"Permission 'cloudquotas.quotas.get' denied on resource 'projects/{project}/locations/global/"
                f"services/{service}' (or it may not exist).",
                [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED",
                  "domain": "cloudquotas.googleapis.com",
                  "metadata": {"permission": "cloudquotas.quotas.get"}}])
        size = coerce_page_size(page_size, 100, 1000)
        metrics = self.quotas.metrics() if service == "aiplatform.googleapis.com" else []
        binding = ("quotaInfos", project, service)
        start, end = offset_page(page_token, binding, size, len(metrics), self.scenario.variants.list_pages)
        page = metrics[start:end]
        body: dict[str, Any] = {"quotaInfos": [self.quotas.quota_info(project, m) for m in page]} if page else {}
        if end < len(metrics):
            body["nextPageToken"] = encode_token(end, *binding)
        return body

    def get_quota_info(self, project: str, service: str, quota_id: str) -> dict:
        listed, token = [], ""
        while True:  # every page (under variants.listPages: short the first one is empty)
            page = self.list_quota_infos(project, service, 1000, token)
            listed += page.get("quotaInfos", [])
            if not (token := page.get("nextPageToken", "")):
                break
        found = next((q for q in listed if q["quotaId"] == quota_id), None)
        if found is None:
            raise ApiError("NOT_FOUND", f"QuotaInfo {quota_id} of {service} does not exist.")
        return found

    # ------------------------------------------------------------------ emulator-only views

    def job_type_history(self, name: str) -> dict | None:
        if name in self.tuning_jobs:
            record = self.tuning_jobs[name]
            return {"name": name, "history": [{"state": s, "time": t.isoformat()} for s, t in record.history],
                    "failedTrials": record.failed,
                    "trials": [{"id": t.id, "state": t.state.value, "customJob": t.custom_job}  # type: ignore[union-attr]
                               for t in record.job.trials or []]}
        if name in self.pipelines:
            record = self.pipelines[name]
            return {"name": name, "history": [{"state": s, "time": t.isoformat()} for s, t in record.history],
                    "backingCustomJob": record.job_name}
        return None

    def job_types_stats(self) -> dict:
        def by_state(records: Any, attr: str) -> dict[str, int]:
            counts: dict[str, int] = {}
            for record in records:
                state = getattr(record, attr).state.value
                counts[state] = counts.get(state, 0) + 1
            return counts

        return {"hyperparameterTuningJobsByState": by_state(self.tuning_jobs.values(), "job"),
                "trainingPipelinesByState": by_state(self.pipelines.values(), "pipeline"),
                "models": len(self.models)}
