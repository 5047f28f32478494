"""Custom jobs: the API (create, get, list, cancel, delete) and making a job's record, for a
create or for a tuning job's trial or a pipeline's backing job. Their life cycle: ``runs.py``.

The job's ``EMULATOR_RUN_SECONDS`` and ``EMULATOR_EXIT_CODE`` env (first worker pool) say how
long it runs and how it exits (a scenario's ``runSeconds`` and 0 without them).

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from airflow_gpu_sched.emulator.api_errors import ApiError, violations_error
from airflow_gpu_sched.emulator.capacity import tier_of
from airflow_gpu_sched.emulator.defaults import fill_server_defaults
from airflow_gpu_sched.emulator.quotas import metric_demand
from airflow_gpu_sched.emulator.resources.holds import Holds
from airflow_gpu_sched.emulator.resources.job_record import JobRecord, affinity_reservation
from airflow_gpu_sched.emulator.resources.listing import list_page
from airflow_gpu_sched.emulator.resources.operations import Operations
from airflow_gpu_sched.emulator.resources.persistent_resources import PersistentResources
from airflow_gpu_sched.emulator.resources.runs import JobRuns
from airflow_gpu_sched.emulator.scenario import MAX_SCENARIO_SECONDS
from airflow_gpu_sched.emulator.resources.store import (
    ADMISSION_START,
    Store,
    cancel_wanted,
    find,
    history_view,
    parse_valid,
    refuse_unless_ended,
)
from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import CustomJob, CustomJobSpec
from airflow_gpu_sched.vertex.rules import Violation, check_custom_job

S = JobState
RUN_SECONDS_ENV, EXIT_CODE_ENV = "EMULATOR_RUN_SECONDS", "EMULATOR_EXIT_CODE"


MAX_EXIT_CODE = 255  # a process's exit status is one byte


def env_knobs(env: dict[str, str], default_run_seconds: float, path: str = "jobSpec") -> tuple[float, int]:
    """The job's run time and exit status from its env (the emulator's knobs), each checked at
    create: a run time finite and within a scenario's bounds (0..MAX_SCENARIO_SECONDS, as
    ``runSeconds``), an exit status 0..255; otherwise a 400 naming the variable (never a job
    accepted whose first read overflows the clock: issue 37)."""
    where = f"{path}.workerPoolSpecs[0].containerSpec.env"
    text = env.get(RUN_SECONDS_ENV)
    try:
        run_seconds = default_run_seconds if text is None else float(text)
    except ValueError:
        run_seconds = math.nan
    if not (math.isfinite(run_seconds) and 0 <= run_seconds <= MAX_SCENARIO_SECONDS):
        raise violations_error([Violation(f"{where}.{RUN_SECONDS_ENV}", f"must be a number of seconds from 0 to "
                                          f"{MAX_SCENARIO_SECONDS:g} (got {str(text)[:40]!r})")])
    text = env.get(EXIT_CODE_ENV, "0")
    code = text.strip()
    if not (code.isascii() and code.isdigit() and len(code) <= 3 and int(code) <= MAX_EXIT_CODE):
        raise violations_error([Violation(f"{where}.{EXIT_CODE_ENV}", f"must be an integer from 0 to {MAX_EXIT_CODE} "
                                          f"(got {text[:40]!r})")])
    return run_seconds, int(code)


# the states the emulator's own life cycle moves a job through (runs.py): not for setState
_LIFE_CYCLE = frozenset({S.JOB_STATE_UNSPECIFIED, S.JOB_STATE_QUEUED, S.JOB_STATE_PENDING, S.JOB_STATE_RUNNING,
                         S.JOB_STATE_CANCELLING})


class CustomJobs:
    def __init__(self, store: Store, runs: JobRuns, holds: Holds, persistent: PersistentResources,
                 operations: Operations):
        self.store = store
        self.runs = runs
        self.holds = holds
        self.persistent = persistent
        self.operations = operations

    def create(self, project: str, location: str, body: dict) -> dict:
        job = parse_valid(CustomJob, body, check_custom_job)
        self.refuse_unrunnable(job.job_spec)
        job = job.model_copy(update={"job_spec": fill_server_defaults(job.job_spec)})  # recorded: diskSpec
        record = self.new_job(project, location, job, self.store.clock.now(), admitted=False)
        answer = record.wire()  # the create answer has no startTime yet (recorded)
        if answer.get("state") == S.JOB_STATE_QUEUED.value:
            # recorded: the create answers PENDING; the next read shows the job QUEUED
            answer = {**answer, "state": S.JOB_STATE_PENDING.value}
        self._set_admission_start(record)
        return answer

    def refuse_unrunnable(self, spec: CustomJobSpec, path: str = "jobSpec") -> None:
        """At create, for a job's spec or a tuning job's trial spec (whose jobs come later, in an
        event, where a refusal can no longer reach the client): its env knobs, and with --execute
        an output directory under the execute root; a 400 naming the field otherwise."""
        env_knobs(spec.worker_pool_specs[0].env, self.store.scenario.run_seconds, path)
        executor = self.store.executor
        problem = executor.output_problem(spec) if executor is not None else None
        if problem:
            raise violations_error([Violation(f"{path}.baseOutputDirectory.outputUriPrefix", problem)])

    def _set_admission_start(self, record: JobRecord) -> None:
        """Variant ``startTime: admission``: every read after the create shows startTime =
        createTime + ~0.14 s, whatever the state (as recorded on real Vertex)."""
        if self.store.scenario.variants.start_time == "admission" and record.job.start_time is None:
            record.job.start_time = record.job.create_time + ADMISSION_START  # type: ignore[operator]
            record.changed()

    def new_job(self, project: str, location: str, job: CustomJob, now: datetime, owner: str | None = None,
                check_quota: bool = True, admitted: bool = True) -> JobRecord:
        """Make a (valid) custom job at emulated time ``now``: for a create, or for a tuning job's
        trial or a pipeline's backing job (``owner``: their name; quota checked at their create)."""
        scenario = self.store.scenario
        spec = job.job_spec
        strategy = spec.strategy
        tier, demand = tier_of(strategy), {a.value: n for a, n in spec.accelerator_demand().items()}
        quota = metric_demand(demand, tier != "standard")
        if spec.persistent_resource_id:  # its VMs were counted when the resource was made
            tier, demand, quota = "persistent", self.persistent.demand(project, location, job), {}
        elif check_quota:
            self.holds.check_quota(location, tier, demand)
        reservation = affinity_reservation(spec)
        if reservation and reservation != "ANY":
            problems = self.holds.reservations.mismatch(reservation, spec)
            zone = reservation.split("/")[3]
            if zone.rsplit("-", 1)[0] != location:
                problems.append(f"reservation {reservation} is in zone {zone}, not in the job's region {location}")
            if problems:  # assumed: Vertex refuses at create a job no VM of the reservation can take
                raise ApiError("FAILED_PRECONDITION", f"jobSpec.workerPoolSpecs.machineSpec.reservationAffinity: "
                                                      f"{'; '.join(problems)}.")
        run_seconds, exit_code = env_knobs(spec.worker_pool_specs[0].env, scenario.run_seconds)
        failure = self.store.job_failures.pop(0) if self.store.job_failures else None
        if failure is not None:  # injected (scenario jobFailures): it fails so, after its run time
            exit_code = failure.exit_code
            run_seconds = run_seconds if failure.after_seconds is None else failure.after_seconds
        job_id = str(self.store.new_id())
        job = job.model_copy(update={
            "name": f"projects/{project}/locations/{location}/customJobs/{job_id}",
            "state": S.JOB_STATE_QUEUED, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None,
        })
        record = JobRecord(job=job, project=project, location=location, seq=self.store.next_seq(), tier=tier,
                           demand=demand, run_seconds=run_seconds, exit_code=exit_code,
                           eligible_at=now + timedelta(seconds=scenario.queue_seconds), owner=owner,
                           quota=quota, reservation=reservation, failure=failure)
        job.state = self.runs.waiting_state(record)
        record.history = [(job.state.value, now)]
        created = self.store.stats["jobsCreated"]
        created[record.strategy_name] = created.get(record.strategy_name, 0) + 1
        self.runs.add(record, now)
        if admitted:  # a trial's or pipeline's job: no create answer to show first
            self._set_admission_start(record)
        return record

    def record(self, name: str) -> JobRecord:
        return find(self.store.jobs, name, "The CustomJob does not exist.")  # recorded: no name in it

    def get(self, name: str) -> dict:
        return self.record(name).wire()

    def list(self, project: str, location: str, filter_text: str = "", page_size: int | None = None,
             page_token: str = "", read_mask: str = "") -> dict:
        return list_page(self.store.jobs.values(), "customJobs", project, location,
                         self.store.scenario.variants.list_pages, filter_text, page_size, page_token,
                         read_mask=read_mask)

    def cancel(self, name: str) -> dict:
        record = self.record(name)
        if cancel_wanted("CustomJob", name, record.state, S.JOB_STATE_CANCELLING,
                         self.store.scenario.variants.cancel_ended):
            self.runs.cancel(record, self.store.clock.now())
        return {}

    def delete(self, name: str) -> dict:
        record = self.record(name)
        refuse_unless_ended("CustomJob", name, record.state)
        self.runs.forget(name)
        return self.operations.deleted(record.project, record.location)

    def preempt(self, name: str) -> dict:
        """Control API: Spot VMs of a PENDING or RUNNING SPOT job reclaimed now."""
        record = self.record(name)
        if record.tier != "spot":
            raise ApiError("FAILED_PRECONDITION", f"{name} is not a SPOT job; only Spot VMs are preempted.")
        if record.state not in (S.JOB_STATE_PENDING, S.JOB_STATE_RUNNING):
            raise ApiError("FAILED_PRECONDITION",
                           f"{name} is {record.state.value}; only a PENDING or RUNNING job can be preempted.")
        self.runs.preempt(record, self.store.clock.now())
        return record.wire()

    def set_state(self, name: str, state: str) -> dict:
        """Control API: hold a job that has not ended in a state the service may show but the
        emulator never reaches itself: ``JOB_STATE_PAUSED``, ``JOB_STATE_UPDATING``, or any
        ``JOB_STATE_*`` name this code does not know (the enum grows); it stays there until cancelled."""
        record = self.record(name)
        new_state = S(state) if re.fullmatch(r"JOB_STATE_[A-Z_]{1,64}", state or "") else None
        if new_state is None or new_state.is_terminal() or new_state in _LIFE_CYCLE:
            raise ApiError("INVALID_ARGUMENT", f"state must be JOB_STATE_PAUSED, JOB_STATE_UPDATING or a JOB_STATE_* "
                                               f"name this emulator does not know (got {state!r})")
        if record.state.is_terminal() or record.state is S.JOB_STATE_CANCELLING:
            raise ApiError("FAILED_PRECONDITION", f"{name} is {record.state.value}: it has ended or is ending.")
        self.runs.hold_in(record, new_state, self.store.clock.now())
        return record.wire()

    def history(self, name: str) -> dict:
        record = self.record(name)
        return {"name": name, "restarts": record.restarts, "progressSeconds": record.progress,
                "history": history_view(record.history)}
