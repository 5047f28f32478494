"""Hyperparameter tuning jobs.

A tuning job runs *real* custom jobs (``custom_jobs.py``; ``JobRecord.owner`` names the tuning
job), so FLEX_START queueing, SPOT preemption and restarts, persistent resources, capacity and
quota apply to its trials unchanged; it watches each state change of its trials' jobs
(``runs.JobRuns.watch``), at its own emulated time.

Tuning job (``hyperparameterTuningJobs``), the emulator's choices marked *:
    create -> answers JOB_STATE_PENDING with no trials, then JOB_STATE_QUEUED with no trials
        (both recorded) for ``queueSeconds``*, then JOB_STATE_PENDING* with ``parallelTrialCount``
        trials started at once (recorded: PENDING -> QUEUED -> PENDING); each trial
        is a custom job ``<display name>-trial-<n>`` with the ``trialJobSpec`` (scheduling, labels
        included) and ``--<parameterId>=<value>`` appended to every pool's args
    first trial job RUNNING -> JOB_STATE_RUNNING (startTime) (variant ``tuningRunning:
        trial_running``), or already when the first trial is created (``trial_created``): not known*
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
        trials beyond the free quota wait their turn (the tuning job stays PENDING until one runs, under ``tuningRunning: trial_running``)

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_gpu_sched.emulator import studies
from airflow_gpu_sched.emulator.api_errors import cancel_failure
from airflow_gpu_sched.emulator.capacity import tier_of
from airflow_gpu_sched.emulator.defaults import fill_server_defaults
from airflow_gpu_sched.emulator.resources.custom_jobs import CustomJobs
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.listing import list_page
from airflow_gpu_sched.emulator.resources.store import ADMISSION_START, cancel_wanted, cancelled_status, find
from airflow_gpu_sched.emulator.resources.store import history_view, parse_valid, refuse_unless_ended
from airflow_gpu_sched.vertex.job_type_models import (
    HyperparameterTuningJob,
    Measurement,
    MeasurementMetric,
    Trial,
    TrialParameter,
)
from airflow_gpu_sched.vertex.enums import JobState, TrialState
from airflow_gpu_sched.vertex.models import CustomJob, Status
from airflow_gpu_sched.vertex.job_type_rules import check_tuning_job

S = JobState
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


class TuningJobs:
    def __init__(self, custom_jobs: CustomJobs):
        self.custom_jobs = custom_jobs
        self.store = store = custom_jobs.store
        self.runs = custom_jobs.runs
        self.records: dict[str, TuningRecord] = {}
        self.runs.watch(self._child_changed)
        store.on("tuning_admitted", lambda name, _epoch, when: self._admitted(name, when))
        store.on("tuning_cancelled", lambda name, _epoch, when: self._cancelled(name, when))

    def create(self, project: str, location: str, body: dict) -> dict:
        job = parse_valid(HyperparameterTuningJob, body, check_tuning_job)
        store = self.store
        now = store.clock.now()
        spec = job.trial_job_spec
        self.custom_jobs.refuse_unrunnable(spec, "trialJobSpec")  # its trials are made later, in events
        if spec.persistent_resource_id:
            self.custom_jobs.persistent.demand(project, location, CustomJob(job_spec=spec))  # raises when it cannot fit
        else:  # per trial: parallel trials beyond the free quota wait QUEUED (assumed)
            demand = {a.value: n for a, n in spec.accelerator_demand().items()}
            self.custom_jobs.holds.check_quota(location, tier_of(spec.strategy), demand)
        name = f"projects/{project}/locations/{location}/hyperparameterTuningJobs/{store.new_id()}"
        job = job.model_copy(update={
            "name": name, "state": S.JOB_STATE_PENDING, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None,
            "trials": None,  # proto3 JSON leaves out an empty list (recorded: no "trials" key)
            "trial_job_spec": fill_server_defaults(spec),  # recorded: diskSpec filled in
        })
        record = TuningRecord(job, project, location, store.next_seq(), history=[(S.JOB_STATE_PENDING.value, now)])
        self.records[name] = record
        store.bump("hyperparameterTuningJobsCreated")
        answer = record.wire()  # recorded: PENDING, no trials, no startTime
        # recorded: then QUEUED with no trials; the trials start after queueSeconds (PENDING again)
        self._state(record, S.JOB_STATE_QUEUED, now)
        store.schedule(now + timedelta(seconds=store.scenario.queue_seconds), "tuning_admitted", name)
        if store.scenario.variants.start_time == "admission" and record.job.start_time is None:
            record.job.start_time = now + ADMISSION_START  # recorded: set at admission
        return answer

    def _record(self, name: str) -> TuningRecord:
        return find(self.records, name, "The HyperparameterTuningJob does not exist.")  # recorded: no name

    def get(self, name: str) -> dict:
        return self._record(name).wire()

    def list(self, project: str, location: str, filter_text: str = "", page_size: int | None = None,
             page_token: str = "", read_mask: str = "") -> dict:
        return list_page(self.records.values(), "hyperparameterTuningJobs", project, location,
                         self.store.scenario.variants.list_pages, filter_text, page_size, page_token,
                         wire=TuningRecord.list_wire, read_mask=read_mask)

    def cancel(self, name: str) -> dict:
        record = self._record(name)
        if not cancel_wanted("HyperparameterTuningJob", name, record.job.state, S.JOB_STATE_CANCELLING,
                             self.store.scenario.variants.cancel_ended):
            return {}
        now = self.store.clock.now()
        self._state(record, S.JOB_STATE_CANCELLING, now)
        if record.trial_jobs:
            self._stop_trials(record, now)
            self._progress(record, now)
        else:  # no trial to stop; recorded: still CANCELLED only seconds later (cancelSeconds)
            self.store.schedule(now + timedelta(seconds=self.store.scenario.cancel_seconds), "tuning_cancelled", name)
        return {}

    def delete(self, name: str) -> dict:
        record = self._record(name)
        refuse_unless_ended("HyperparameterTuningJob", name, record.job.state)
        del self.records[name]
        return self.custom_jobs.operations.deleted(record.project, record.location)

    def _admitted(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is not None and record.job.state is S.JOB_STATE_QUEUED:
            self._state(record, S.JOB_STATE_PENDING, when)
            self._progress(record, when)

    def _cancelled(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is not None and record.job.state is S.JOB_STATE_CANCELLING:
            record.job.error = cancelled_status()
            self._state(record, S.JOB_STATE_CANCELLED, when)

    def _state(self, record: TuningRecord, state: JobState, when: datetime) -> None:
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
        values = studies.suggest(job.study_spec, self.store.scenario.seed, job.job_id or "", number)
        spec = job.trial_job_spec.model_copy(deep=True)
        flags = [f"--{k}={v}" for k, v in values.items()]
        for _, pool in spec.active_pools():
            task = pool.container_spec or pool.python_package_spec
            if task is not None:
                task.args = list(task.args or []) + flags
        suffix = f"-trial-{number}"
        display = (job.display_name or "")[: 128 - len(suffix)] + suffix
        child = self.custom_jobs.new_job(
            record.project, record.location,
            CustomJob(display_name=display, job_spec=spec, labels=copy.deepcopy(job.labels)),
            when, owner=job.name, check_quota=False)
        trial = Trial(id=str(number), state=TrialState.ACTIVE, start_time=when, custom_job=child.job.name,
                      parameters=[TrialParameter(parameter_id=k, value=v) for k, v in values.items()])
        job.trials = [*(job.trials or []), trial]
        record.trial_jobs[child.job.name] = number - 1
        job.update_time = when
        if self.store.scenario.variants.tuning_running == "trial_created" and job.state is S.JOB_STATE_PENDING:
            self._state(record, S.JOB_STATE_RUNNING, when)

    def _stop_trials(self, record: TuningRecord, when: datetime) -> None:
        for name in list(record.trial_jobs):
            child = self.store.jobs.get(name)
            if child is not None and not child.state.is_terminal():
                self.runs.cancel(child, when)

    def _child_changed(self, child: JobRecord, when: datetime) -> None:
        record = self.records.get(child.owner or "")
        index = record.trial_jobs.get(child.job.name) if record is not None else None
        if record is None or index is None:
            return
        job, trial = record.job, (record.job.trials or [])[index]
        state = child.state
        job.update_time = when
        if state is S.JOB_STATE_RUNNING and job.state is S.JOB_STATE_PENDING:
            self._state(record, S.JOB_STATE_RUNNING, when)
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
                        self._fail(record, trial, error, when)
                        return
            self._progress(record, when)

    def _fail(self, record: TuningRecord, trial: Trial, error: Status, when: datetime) -> None:
        job = record.job
        job.error = Status(code=error.code, details=copy.deepcopy(error.details), message=(
            f"{error.message} (trial {trial.id} of HyperparameterTuningJob {job.name}; "
            f"{record.failed} of {job.max_trial_count} trial(s) failed)"))
        self._state(record, S.JOB_STATE_FAILED, when)
        self._stop_trials(record, when)

    def _progress(self, record: TuningRecord, when: datetime) -> None:
        job = record.job
        if job.state.is_terminal():  # type: ignore[union-attr]
            return
        trials = job.trials or []
        active = sum(1 for t in trials if not t.state.is_terminal())  # type: ignore[union-attr]
        if job.state is S.JOB_STATE_QUEUED:  # not admitted yet: no trials
            return
        if job.state is S.JOB_STATE_CANCELLING:
            if active == 0:  # as the scenario's cancelOutcome says, if it ran (as a custom job)
                outcome = self.runs.cancel_outcome(record.history) if self._a_trial_ran(record) else "cancelled"
                if outcome == "succeeded":
                    self._state(record, S.JOB_STATE_SUCCEEDED, when)
                elif outcome == "failed":
                    job.error = cancel_failure()
                    self._state(record, S.JOB_STATE_FAILED, when)
                else:
                    job.error = cancelled_status()
                    self._state(record, S.JOB_STATE_CANCELLED, when)
            return
        while len(job.trials or []) < (job.max_trial_count or 0) and active < (job.parallel_trial_count or 1):
            self._spawn_trial(record, when)
            active += 1
        if active == 0 and len(job.trials or []) >= (job.max_trial_count or 0):
            if any(t.state is TrialState.SUCCEEDED for t in trials):
                self._state(record, S.JOB_STATE_SUCCEEDED, when)
            else:
                last = max((t for t in trials), key=lambda t: (t.end_time or when, int(t.id or 0)))
                child = self.store.jobs.get(last.custom_job or "")
                error = (child.job.error if child is not None else None) or Status(code=2, message="Every trial failed.")
                self._fail(record, last, error, when)

    def _a_trial_ran(self, record: TuningRecord) -> bool:
        """Only a tuning job whose trials ran can complete or fail despite a cancel (RUNNING alone
        does not say it under ``tuningRunning: trial_created``)."""
        jobs = (self.store.jobs.get(name) for name in record.trial_jobs)
        return any(S.JOB_STATE_RUNNING.value in (s for s, _ in job.history) for job in jobs if job is not None)

    def history(self, name: str) -> dict:
        record = self.records[name]
        return {"name": name, "history": history_view(record.history), "failedTrials": record.failed,
                "trials": [{"id": t.id, "state": t.state.value, "customJob": t.custom_job}  # type: ignore[union-attr]
                           for t in record.job.trials or []]}
