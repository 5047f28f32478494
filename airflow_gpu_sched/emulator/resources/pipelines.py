"""Training pipelines (custom task only), the emulator's choices marked *.

A pipeline runs a *real* custom job (``custom_jobs.py``; ``JobRecord.owner`` names the pipeline),
so FLEX_START queueing, SPOT preemption and restarts, persistent resources, capacity and quota
apply to it unchanged; it watches each state change of that job (``runs.JobRuns.watch``).

Training pipeline (``trainingPipelines``, custom task only): one custom job from
    ``trainingTaskInputs`` (``trainingTaskMetadata.backingCustomJob``, set in the create's answer:
    PENDING with the job named, as Google's create-training-pipeline example shows);
    PIPELINE_STATE_RUNNING ``queueSeconds``* after the create, while its job still waits for its
    VMs (variant ``pipelineRunning: job_created``, observed: public training logs, Feb 2026), or
    only when the job runs (``job_running``); when it succeeds the model is registered
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

from airflow_gpu_sched.emulator.api_errors import ApiError, violations_error
from airflow_gpu_sched.emulator.capacity import tier_of
from airflow_gpu_sched.emulator.resources.custom_jobs import CustomJobs
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.listing import list_page
from airflow_gpu_sched.emulator.resources.model_registry import Models, RegistrationFailed
from airflow_gpu_sched.emulator.resources.store import ADMISSION_START, cancel_wanted, cancelled_status, find
from airflow_gpu_sched.emulator.resources.store import history_view, parse_valid, refuse_unless_ended
from airflow_gpu_sched.vertex.job_type_models import TrainingPipeline
from airflow_gpu_sched.vertex.enums import JobState, PipelineState
from airflow_gpu_sched.vertex.models import RPC_STATUS, CustomJob, Status
from airflow_gpu_sched.vertex.job_type_rules import check_training_pipeline
from airflow_gpu_sched.vertex.rules import Violation

S, P = JobState, PipelineState


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


class TrainingPipelines:
    def __init__(self, custom_jobs: CustomJobs, models: Models):
        self.custom_jobs = custom_jobs
        self.models = models
        self.store = store = custom_jobs.store
        self.records: dict[str, PipelineRecord] = {}
        custom_jobs.runs.watch(self._job_changed)
        store.on("pipeline_refused", lambda name, _epoch, when: self._refused(name, when))
        store.on("pipeline_started", lambda name, _epoch, when: self._started(name, when))

    def create(self, project: str, location: str, body: dict) -> dict:
        pipeline = parse_valid(TrainingPipeline, body, check_training_pipeline)
        models = f"projects/{project}/locations/{location}/models"
        if pipeline.parent_model is not None and pipeline.parent_model not in self.models.records:
            raise violations_error([Violation(
                "parentModel", f"model {pipeline.parent_model} does not exist (it must be in {models})")],
                status="FAILED_PRECONDITION")
        if pipeline.parent_model is None and pipeline.model_id and f"{models}/{pipeline.model_id}" in self.models.records:
            raise ApiError("ALREADY_EXISTS", f"Model {models}/{pipeline.model_id} already exists; "
                                             "set parentModel to upload a new version of it.")
        store = self.store
        now = store.clock.now()
        name = f"projects/{project}/locations/{location}/trainingPipelines/{store.new_id()}"
        job = CustomJob(display_name=pipeline.display_name, job_spec=pipeline.custom_job_spec,
                        labels=copy.deepcopy(pipeline.labels))
        spec = pipeline.custom_job_spec
        refusal = None if spec.persistent_resource_id else self.custom_jobs.holds.quota_refusal(
            location, tier_of(spec.strategy), {a.value: n for a, n in spec.accelerator_demand().items()})
        child = None if refusal else self.custom_jobs.new_job(project, location, job, now, owner=name,
                                                              check_quota=False)
        model = pipeline.model_to_upload.model_copy(update={  # type: ignore[union-attr]
            "name": None, "version_id": None, "create_time": None, "update_time": None,
            "version_create_time": None, "version_update_time": None, "training_pipeline": None})
        pipeline = pipeline.model_copy(update={
            "name": name, "state": P.PIPELINE_STATE_PENDING, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None, "model_to_upload": model,
            "training_task_metadata": {"backingCustomJob": child.job.name} if child else None,
        })
        record = PipelineRecord(pipeline, project, location, store.next_seq(), child.job.name if child else None,
                                history=[(P.PIPELINE_STATE_PENDING.value, now)], refusal=refusal)
        self.records[name] = record
        if refusal:  # the service tries to make its custom job, which the quota refuses
            store.schedule(now + timedelta(seconds=store.scenario.queue_seconds), "pipeline_refused", name)
        elif store.scenario.variants.pipeline_running == "job_created":  # RUNNING, its job still waiting
            store.schedule(now + timedelta(seconds=store.scenario.queue_seconds), "pipeline_started", name)
        store.bump("trainingPipelinesCreated")
        answer = record.wire()
        if store.scenario.variants.start_time == "admission":  # assumed as for custom/tuning jobs
            pipeline.start_time = now + ADMISSION_START
        return answer

    def _record(self, name: str) -> PipelineRecord:
        return find(self.records, name, f'The TrainingPipeline "{name}" does not exist.')

    def get(self, name: str) -> dict:
        return self._record(name).wire()

    def list(self, project: str, location: str, filter_text: str = "", page_size: int | None = None,
             page_token: str = "", read_mask: str = "") -> dict:
        return list_page(self.records.values(), "trainingPipelines", project, location,
                         self.store.scenario.variants.list_pages, filter_text, page_size, page_token,
                         read_mask=read_mask)

    def cancel(self, name: str) -> dict:
        record = self._record(name)
        if not cancel_wanted("TrainingPipeline", name, record.pipeline.state, P.PIPELINE_STATE_CANCELLING,
                             self.store.scenario.variants.cancel_ended):
            return {}
        now = self.store.clock.now()
        self._state(record, P.PIPELINE_STATE_CANCELLING, now)
        child = self.store.jobs.get(record.job_name or "")
        if child is not None:
            self.custom_jobs.runs.cancel(child, now)
        else:  # no job to stop (refused for quota): cancelled at once
            self._state(record, P.PIPELINE_STATE_CANCELLED, now, cancelled_status())
        return {}

    def _refused(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is None or record.refusal is None or record.pipeline.state.is_terminal():  # type: ignore[union-attr]
            return
        code = RPC_STATUS["RESOURCE_EXHAUSTED"][0]  # 8, as in vertex-ai-samples#700
        self._state(record, P.PIPELINE_STATE_FAILED, when, Status(code=code, message=record.refusal))

    def _started(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is not None and record.pipeline.state is P.PIPELINE_STATE_PENDING:
            self._state(record, P.PIPELINE_STATE_RUNNING, when)

    def delete(self, name: str) -> dict:
        record = self._record(name)
        refuse_unless_ended("TrainingPipeline", name, record.pipeline.state)
        del self.records[name]
        return self.custom_jobs.operations.deleted(record.project, record.location)

    def _state(self, record: PipelineRecord, state: PipelineState, when: datetime, error: Status | None = None) -> None:
        pipeline = record.pipeline
        pipeline.state = state
        pipeline.update_time = when
        record.history.append((state.value, when))
        if state is P.PIPELINE_STATE_RUNNING and pipeline.start_time is None:
            pipeline.start_time = when
        if state.is_terminal():
            pipeline.end_time = when
            pipeline.error = error

    def _job_changed(self, child: JobRecord, when: datetime) -> None:
        record = self.records.get(child.owner or "")
        if record is None:
            return
        pipeline, state = record.pipeline, child.state
        if pipeline.state.is_terminal():  # type: ignore[union-attr]
            return
        if state is S.JOB_STATE_RUNNING and pipeline.state is P.PIPELINE_STATE_PENDING:
            self._state(record, P.PIPELINE_STATE_RUNNING, when)
        elif state is S.JOB_STATE_CANCELLING:
            self._state(record, P.PIPELINE_STATE_CANCELLING, when)
        elif state is S.JOB_STATE_SUCCEEDED:
            try:
                pipeline.model_to_upload = self.models.register(pipeline, record.project, record.location, when)
            except RegistrationFailed as failed:
                self._state(record, P.PIPELINE_STATE_FAILED, when, failed.status)
                return
            self._state(record, P.PIPELINE_STATE_SUCCEEDED, when)
        elif state is S.JOB_STATE_CANCELLED:
            self._state(record, P.PIPELINE_STATE_CANCELLED, when, cancelled_status())
        elif state.is_terminal():
            self._state(record, P.PIPELINE_STATE_FAILED, when,
                        child.job.error or Status(code=2, message=f"{child.job.name} ended {state.value}."))

    def history(self, name: str) -> dict:
        record = self.records[name]
        return {"name": name, "history": history_view(record.history), "backingCustomJob": record.job_name}
