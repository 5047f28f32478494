"""The emulator's state: custom jobs, persistent resources, operations, capacity, and time.

A discrete-event simulation on an emulated clock. Every change is an event with the emulated
time it happens at (admission, provisioning done, run done, preemption, wait expiry, ...);
``advance()`` applies all events due by "now" in time order before each request is answered.
So timestamps are exact whatever the polling rhythm, and nothing runs in the background.

Job life cycle (the emulator's choices where Google documents none are marked *):
    create -> QUEUED -> (capacity for all its GPUs) PENDING -> RUNNING -> SUCCEEDED | FAILED
    cancel -> CANCELLING -> CANCELLED, error.code 1
    quota (emulator/quotas.py): a job alone over a limit -> 429 at create; over it only next to
        what other jobs hold -> stays QUEUED until the quota is free
    STANDARD stockout (scenario ``standardStockoutSeconds`` per location and accelerator): a job
        QUEUED that long for want of capacity -> FAILED, error code 8 RESOURCE_EXHAUSTED*,
        "Resources are insufficient in region: <region>", no ErrorInfo*
    FLEX_START: waits QUEUED until every GPU it asks for is free at once; when
        maxWaitDuration passes first -> FAILED, error code 4 DEADLINE_EXCEEDED, reason
        FLEX_START_WAIT_EXPIRED*
    SPOT preemption: capacity is released and the service restarts the job (PENDING, or QUEUED
        while no Spot capacity is free) up to ``max_service_restarts`` (6) times; the next
        preemption -> FAILED, error code 8 RESOURCE_EXHAUSTED, reason STOCKOUT*
    user code exit != 0 (EMULATOR_EXIT_CODE) -> FAILED, error code 3 INVALID_ARGUMENT,
        "The replica workerpool0-0 exited with a non-zero status of N"
    running past scheduling.timeout -> FAILED, error code 4, reason JOB_TIMEOUT*
    startTime: createTime + 0.14 s at admission, on every read after the create (recorded)
A preempted job keeps its progress (it resumes from its checkpoints).

Assumed behaviours come in variants (``Scenario.variants``, see docs/fidelity.md): SPOT restarts
visible (above) or invisible (the job stays RUNNING through them, each restart costing
``provisioning_seconds`` of no progress); errors with an ErrorInfo reason or message only;
FLEX_START expiry as FAILED (above) or JOB_STATE_EXPIRED (no error, no endTime: the proto
fills those for FAILED/CANCELLED only) or CANCELLED; a timeout as FAILED or CANCELLED;
FLEX_START waiting in QUEUED or PENDING; startTime at admission or at the first RUNNING.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from airflow_gpu_sched.emulator.api_errors import ApiError, cancel_failure, violations_error
from airflow_gpu_sched.emulator.capacity import CapacityLedger, tier_of
from airflow_gpu_sched.emulator.clock import EmulatedClock
from airflow_gpu_sched.emulator.defaults import fill_server_defaults
from airflow_gpu_sched.emulator.fieldmask import FieldMaskError, parse_read_mask
from airflow_gpu_sched.emulator.fieldmask import project as project_mask
from airflow_gpu_sched.emulator.filters import FilterError, parse_filter
from airflow_gpu_sched.emulator.jobtypes import ADMISSION_START, JobTypesMixin
from airflow_gpu_sched.emulator.paging import coerce_page_size, decode_token, encode_token, offset_page, short_window
from airflow_gpu_sched.emulator.quotas import QuotaStore, metric_demand
from airflow_gpu_sched.emulator.reservations import ReservationStore
from airflow_gpu_sched.emulator.scenario import Scenario
from airflow_gpu_sched.vertex.models import (
    RPC_STATUS,
    CustomJob,
    JobState,
    Operation,
    PersistentResource,
    Scheduling,
    PersistentResourceState,
    Status,
    Strategy,
    format_duration,
    format_timestamp,
)
from airflow_gpu_sched.vertex.rules import (
    Violation,
    check_custom_job,
    check_persistent_fit,
    check_persistent_resource,
    parse_violations,
)

S = JobState
ERROR_DOMAIN = "aiplatform.googleapis.com"
DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000
RUN_SECONDS_ENV, EXIT_CODE_ENV = "EMULATOR_RUN_SECONDS", "EMULATOR_EXIT_CODE"
ANY_EPOCH = -1  # an event that fires whatever transitions happened since it was scheduled


def _error_status(code_name: str, message: str, reason: str | None = None) -> Status:
    details = None
    if reason:
        details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                    "domain": ERROR_DOMAIN}]
    return Status(code=RPC_STATUS[code_name][0], message=message, details=details)


@dataclass
class JobRecord:
    job: CustomJob
    project: str
    location: str
    seq: int
    tier: str  # capacity tier, or "persistent"
    demand: dict[str, int]  # accelerator -> GPUs held at once (replicas per pool id on a persistent resource)
    run_seconds: float
    exit_code: int
    eligible_at: datetime
    epoch: int = 0  # bumped on every transition: events from an older epoch are stale
    holds: bool = False  # holds capacity right now
    progress: float = 0.0  # emulated seconds of run time done before the current run segment
    running_since: datetime | None = None
    restarts: int = 0
    history: list[tuple[str, datetime]] = field(default_factory=list)
    owner: str | None = None  # the tuning job or training pipeline that made this job
    quota: dict[str, int] = field(default_factory=dict)  # quota metric -> GPUs, held while ``holds``
    reservation: str | None = None  # the reservation its affinity names, or "ANY" (emulator/reservations.py)
    reserved: str | None = None  # the reservation it holds VMs of now
    _wire: dict | None = None

    @property
    def state(self) -> JobState:
        return self.job.state  # type: ignore[return-value]

    def wire(self) -> dict:
        if self._wire is None:
            self._wire = self.job.to_api()
        return self._wire

    def filter_record(self) -> dict:
        return {"display_name": self.job.display_name, "state": self.state.value,
                "create_time": self.job.create_time, "labels": self.job.labels or {}}


@dataclass
class ResourceRecord:
    resource: PersistentResource
    project: str
    location: str
    operation: str | None = None


def _vms(record: JobRecord) -> int:
    """VMs a job holds of a reservation: one per replica."""
    return sum(pool.replicas for _, pool in record.job.job_spec.active_pools())


def _affinity_reservation(spec: Any) -> str | None:
    """The reservation the job's pools name (a SPECIFIC_RESERVATION), "ANY", or None."""
    from airflow_gpu_sched.vertex.reservations import reserved_name

    for _, pool in spec.active_pools():
        affinity = pool.machine_spec.reservation_affinity if pool.machine_spec else None
        if affinity and affinity.get("reservationAffinityType") in ("ANY_RESERVATION", 2):
            return "ANY"
        if reserved_name(affinity):
            return reserved_name(affinity)
    return None


@lru_cache(maxsize=256)
def _cached_filter(text: str, collection: str):
    return parse_filter(text, collection)



def _logs_url(record: JobRecord) -> str:
    """The Cloud Logging link Vertex puts after "please check the logs:" in a failed job's error
    (observed in public job logs; the real one carries the project number)."""
    job_id = record.job.job_id
    return (f"https://console.cloud.google.com/logs/viewer?project={record.project}"
            f"&resource=ml_job%2Fjob_id%2F{job_id}&advancedFilter=resource.type%3D%22ml_job%22"
            f"%0Aresource.labels.job_id%3D%22{job_id}%22")

class Backend(JobTypesMixin):
    """All emulated state. Not thread-safe: the HTTP app calls it from one event loop.
    Tuning jobs, training pipelines and models: :class:`JobTypesMixin` (``jobtypes.py``)."""

    def __init__(self, scenario: Scenario | None = None):
        scenario = scenario or Scenario()
        # The execution settings of the constructor's scenario (the CLI's --execute): a reset over
        # HTTP keeps them and may not set them (app.py EXECUTION_FIELDS; docs/security.md).
        self.execution = {"execute": scenario.execute, "execute_root": scenario.execute_root,
                          "execute_workdir": scenario.execute_workdir}
        self.reset(scenario)

    # ------------------------------------------------------------------ set-up

    def reset(self, scenario: Scenario | None = None) -> None:
        if getattr(self, "executor", None) is not None:
            self.executor.stop_all()
        self.scenario = scenario or Scenario()
        self.executor = None
        if self.scenario.execute:
            import tempfile

            from airflow_gpu_sched.emulator.executor import LocalExecutor

            root = self.scenario.execute_root or tempfile.mkdtemp(prefix="vertex_emulator_")
            self.executor = LocalExecutor(root, self.scenario.execute_workdir)
        self.clock = EmulatedClock(self.scenario.speed)
        self.rng = random.Random(self.scenario.seed)
        self.capacity = CapacityLedger(self.scenario.default_capacity)
        self.stockouts: dict[tuple[str, str], float] = {}  # (location, accelerator) -> standardStockoutSeconds
        self.jobs: dict[str, JobRecord] = {}  # in creation order
        self._queue: dict[str, JobRecord] = {}  # jobs in QUEUED, waiting for capacity
        self._seq = itertools.count()
        self.resources: dict[str, ResourceRecord] = {}
        self.operations: dict[str, Operation] = {}
        self._events: list[tuple[datetime, int, str, str, int]] = []
        self._event_seq = itertools.count()
        self._ids = itertools.count(1_000_000_000_000_000_001)
        self.faults = self.scenario.faults
        self.stats: dict[str, Any] = {"requests": {}, "faultsInjected": 0, "jobsCreated": {},
                                      "preemptions": 0, "serviceRestarts": 0, "cancels": 0}
        self.quotas = QuotaStore(self.scenario.default_gpu_quota)
        for quota in self.scenario.quota:
            self.set_quota(quota.model_dump())
        for limit in self.scenario.quotas:
            self.quotas.set(limit.metric, limit.region, limit.limit)
        self.reset_job_types()
        self.reservations = ReservationStore()
        for seeded in self.scenario.reservations:
            self.reservations.insert(seeded.project, seeded.zone, dict(seeded.reservation), self.clock.now())
        for setting in self.scenario.capacity:
            self.apply_capacity(setting.model_dump(exclude_unset=True), at_seconds=setting.at_seconds)
        for seeded in self.scenario.persistent_resources:
            self.create_persistent_resource(seeded.project, seeded.location, seeded.resource,
                                            seeded.id, ready=True)

    def apply_capacity(self, setting: dict, at_seconds: float | None = None) -> None:
        """A capacity setting (keys as CapacitySetting's fields; a tier left out is unchanged;
        ``standard_stockout_seconds`` left out is unchanged, None clears it)."""
        location, accelerator = setting["location"], setting["accelerator_type"]
        tiers = {t: setting.get(t) for t in ("standard", "spot", "flex_start")}
        stockout = {k: setting[k] for k in ("standard_stockout_seconds",) if k in setting}
        if at_seconds is not None:
            when = self.clock.now() + timedelta(seconds=at_seconds)
            self._schedule(when, "capacity", json.dumps([location, accelerator, tiers, stockout]))
            return
        self._set_capacity(location, accelerator, tiers, stockout, self.clock.now())

    def _set_capacity(self, location: str, accelerator: str, tiers: dict, stockout: dict, when: datetime) -> None:
        self.capacity.set(location, accelerator, **tiers)
        if "standard_stockout_seconds" in stockout:
            seconds = stockout["standard_stockout_seconds"]
            if seconds is None:
                self.stockouts.pop((location, accelerator), None)
            else:
                if seconds < 0:
                    raise ValueError(f"standardStockoutSeconds must be 0 or more (got {seconds})")
                self.stockouts[(location, accelerator)] = float(seconds)
                for record in list(self._queue.values()):  # jobs already waiting get the new bound too
                    if record.location == location and accelerator in record.demand:
                        self._schedule_stockout(record, when)
        self._admit(when)

    def _stockout_seconds(self, record: JobRecord) -> float | None:
        """How long this STANDARD job may wait QUEUED for capacity before the stockout (None: for ever)."""
        if record.tier != "standard":
            return None
        found = [self.stockouts[(record.location, a)] for a in record.demand if (record.location, a) in self.stockouts]
        return min(found) if found else None

    def _schedule_stockout(self, record: JobRecord, now: datetime) -> None:
        seconds = self._stockout_seconds(record)
        if seconds is not None and record.state is S.JOB_STATE_QUEUED:
            when = max(now, record.job.create_time + timedelta(seconds=seconds))  # type: ignore[operator]
            self._schedule(when, "stockout", record.job.name, record.epoch)

    def _stockout(self, record: JobRecord, when: datetime) -> None:
        """A STANDARD job still QUEUED at its stockout time: failed by the service after its own
        retries if capacity is what it lacks; one waiting for quota keeps waiting (checked again later)."""
        if record.state is not S.JOB_STATE_QUEUED:
            return
        if not self.quotas.fits(record.project, record.location, record.quota):
            again = max(1.0, self._stockout_seconds(record) or 0.0)  # never the same instant: no event loop
            self._schedule(when + timedelta(seconds=again), "stockout", record.job.name, record.epoch)
            return
        # observed: openreview/openreview-expertise#401; the code (8) and no ErrorInfo are assumed
        self._fail(record, when, _error_status("RESOURCE_EXHAUSTED",
                                               f"Resources are insufficient in region: {record.location}"))

    def set_quota_limit(self, metric: str, region: str | None, limit: int) -> None:
        """A Cloud Quotas limit; a raised limit admits jobs that were waiting for it."""
        self.quotas.set(metric, region, limit)
        self._admit(self.clock.now())

    def set_quota(self, setting: dict) -> None:
        """The older per-accelerator form; writes the same store as the Cloud Quotas view."""
        for kind in ("standard", "preemptible"):
            if setting.get(kind) is not None:
                self.quotas.set_for_accelerator(setting["location"], setting["accelerator_type"],
                                                kind == "preemptible", setting[kind])
        self._admit(self.clock.now())

    def _quota_refusal(self, location: str, tier: str, demand: dict[str, int]) -> str | None:
        """Google's 429 message when the job alone needs more than a limit (SPOT and FLEX_START
        draw on the preemptible quota), else None: a job that fits waits for quota when admitted."""
        metric = self.quotas.refused(location, metric_demand(demand, tier != "standard"))
        return f"The following quota metrics exceed quota limits: {metric}" if metric else None

    def _check_quota(self, location: str, tier: str, demand: dict[str, int]) -> None:
        refusal = self._quota_refusal(location, tier, demand)
        if refusal:
            raise ApiError("RESOURCE_EXHAUSTED", refusal)

    # ------------------------------------------------------------------ events

    def _schedule(self, when: datetime, kind: str, key: str, epoch: int = 0) -> None:
        heapq.heappush(self._events, (when, next(self._event_seq), kind, key, epoch))

    def advance(self) -> None:
        """Apply every event due by now, in time order, each at its own time."""
        now = self.clock.now()
        if self.executor is not None:  # --execute: a process that ended decides its job
            for name, status in self.executor.finished():
                record = self.jobs.get(name)
                if record is not None and record.state is S.JOB_STATE_RUNNING:
                    record.exit_code = status
                    self._job_event(record, "finish", now)
        while self._events and self._events[0][0] <= now:
            when, _, kind, key, epoch = heapq.heappop(self._events)
            if kind == "capacity":
                location, accelerator, tiers, stockout = json.loads(key)
                self._set_capacity(location, accelerator, tiers, stockout, when)
            elif kind == "pipeline_refused":
                self._pipeline_refused(key, when)
            elif kind == "resource_ready":
                self._resource_ready(key, when)
            elif kind.startswith("tuning_"):
                self._tuning_event(kind, key, when)
            else:
                record = self.jobs.get(key)
                if record is not None and epoch in (record.epoch, ANY_EPOCH):
                    self._job_event(record, kind, when)

    def _job_event(self, record: JobRecord, kind: str, when: datetime) -> None:
        if kind == "eligible":
            self._admit(when)
        elif kind == "provisioned":
            self._start_running(record, when)
        elif kind == "finish":
            if record.exit_code:
                self._fail(record, when, _error_status(
                    "INVALID_ARGUMENT",
                    f"The replica workerpool0-0 exited with a non-zero status of {record.exit_code}. "
                    f"To find out more about why your job exited please check the logs: {_logs_url(record)}"))
            else:
                self._end(record, S.JOB_STATE_SUCCEEDED, when)
        elif kind == "preempt":
            self._preempt(record, when)
        elif kind == "stockout":
            self._stockout(record, when)
        elif kind == "wait_expired" and record.job.name in self._queue:
            if self.scenario.variants.flex_start_expiry == "expired":
                self._end(record, S.JOB_STATE_EXPIRED, when)
                return
            if self.scenario.variants.flex_start_expiry == "cancelled":
                self._end(record, S.JOB_STATE_CANCELLED, when, Status(code=1, message="CANCELED"))
                return
            wait = record.job.job_spec.scheduling.max_wait_duration  # type: ignore[union-attr]
            self._fail(record, when, _error_status(
                "DEADLINE_EXCEEDED",
                f"The job could not get its resources ({self._describe_demand(record)}) within "
                f"scheduling.maxWaitDuration ({format_duration(wait)}): the FLEX_START capacity "
                "wait expired.", "FLEX_START_WAIT_EXPIRED"))
        elif kind == "timeout":
            if self.scenario.variants.timeout_outcome == "cancelled":
                self._end(record, S.JOB_STATE_CANCELLED, when, Status(code=1, message="CANCELED"))
                return
            timeout = record.job.job_spec.scheduling.timeout  # type: ignore[union-attr]
            self._fail(record, when, _error_status(
                "DEADLINE_EXCEEDED",
                f"The job ran longer than scheduling.timeout ({format_duration(timeout)}).", "JOB_TIMEOUT"))
        elif kind == "cancelled":
            self._end_cancelled(record, when)
        elif kind == "reservation_full" and record.job.name in self._queue:
            # variant "failed" (assumed: Google documents no behaviour for a full reservation)
            self._fail(record, when, _error_status(
                "RESOURCE_EXHAUSTED", f"Resources are insufficient in reservation {record.reservation}: "
                f"{self.reservations.get(record.reservation or '')['specificReservation']['inUseCount']} of "
                f"{self.reservations.get(record.reservation or '')['specificReservation']['count']} VMs are in use.",
                "ZONE_RESOURCE_POOL_EXHAUSTED"))
        elif kind == "restarted" and record.state is S.JOB_STATE_RUNNING:
            self._run_segment(record, when)  # an invisible restart is over: the run resumes

    # ------------------------------------------------------------------ transitions

    def _waiting_state(self, record: JobRecord) -> JobState:
        """The state a job waiting for capacity shows (a FLEX_START one: the scenario's variant)."""
        if record.job.job_spec.strategy is Strategy.FLEX_START:
            return JobState(self.scenario.variants.flex_start_waiting_state)
        return S.JOB_STATE_QUEUED

    def _set_state(self, record: JobRecord, state: JobState, when: datetime) -> None:
        """``state`` QUEUED means "waiting for capacity": the record joins the queue and shows
        its waiting state."""
        if state is S.JOB_STATE_QUEUED:
            self._queue[record.job.name] = record
            state = self._waiting_state(record)
        else:
            self._queue.pop(record.job.name, None)
        record.job.state = state
        record.job.update_time = when
        record.epoch += 1
        record.history.append((state.value, when))
        record._wire = None
        if record.owner is not None:
            self._child_changed(record, when)  # a trial's or a pipeline's custom job moved

    def _admit(self, when: datetime) -> None:
        """Give free capacity to waiting jobs, oldest first (a job that does not fit is skipped)."""
        for record in sorted(self._queue.values(), key=lambda r: r.seq):
            if record.eligible_at <= when and self._take(record):
                self._set_state(record, S.JOB_STATE_PENDING, when)
                spec = record.job.job_spec
                delay = (self.scenario.persistent_provisioning_seconds if spec.persistent_resource_id
                         else self.scenario.provisioning_seconds)
                self._schedule(when + timedelta(seconds=delay), "provisioned", record.job.name, record.epoch)

    def _take(self, record: JobRecord) -> bool:
        if record.tier == "persistent":
            pools = self._resource_pools(record)
            if pools is None or any((pools[pid].free_replicas < n) for pid, n in record.demand.items()):
                return False
            for pid, n in record.demand.items():
                pools[pid].used_replica_count = (pools[pid].used_replica_count or 0) + n
        elif record.reservation and self._take_reserved(record):
            return True
        elif record.reservation and record.reservation != "ANY":
            return False  # a specific reservation only: it waits (or fails, by the variant)
        else:
            # quota first (it is the project's), then the region's capacity; both or nothing
            if not self.quotas.fits(record.project, record.location, record.quota):
                return False
            if not self.capacity.try_take(record.location, record.tier, record.demand):
                return False
            self.quotas.take(record.project, record.location, record.quota)
        record.holds = True
        return True

    def _release(self, record: JobRecord) -> None:
        if not record.holds:
            return
        record.holds = False
        if record.tier == "persistent":
            pools = self._resource_pools(record) or {}
            for pid, n in record.demand.items():
                if pid in pools:
                    pools[pid].used_replica_count = max(0, (pools[pid].used_replica_count or 0) - n)
        elif record.reserved:
            self.reservations.give_back(record.reserved, _vms(record))
            record.reserved = None
            self.quotas.give_back(record.project, record.location, record.quota)
        else:
            self.capacity.give_back(record.location, record.tier, record.demand)
            self.quotas.give_back(record.project, record.location, record.quota)

    def _take_reserved(self, record: JobRecord) -> bool:
        """VMs of the job's reservation (its named one, or any matching one for ANY), with quota."""
        if not self.quotas.fits(record.project, record.location, record.quota):
            return False
        name = self.reservations.choose(record.reservation or "", record.location, record.job.job_spec, _vms(record))
        if name is None:
            if record.reservation != "ANY" and self.scenario.variants.reservation_full == "failed":
                self._schedule(self.clock.now(), "reservation_full", record.job.name, record.epoch)
            return False
        self.reservations.take(name, _vms(record))
        self.quotas.take(record.project, record.location, record.quota)
        record.reserved, record.holds = name, True
        return True

    def _resource_pools(self, record: JobRecord) -> dict | None:
        name = self._resource_name(record.project, record.location, record.job.job_spec.persistent_resource_id)
        res = self.resources.get(name)
        if res is None or res.resource.state is not PersistentResourceState.RUNNING:
            return None
        return {p.id: p for p in res.resource.resource_pools}

    def _start_running(self, record: JobRecord, when: datetime) -> None:
        self._set_state(record, S.JOB_STATE_RUNNING, when)
        if record.job.start_time is None:
            record.job.start_time = when
        self._run_segment(record, when)

    def _run_segment(self, record: JobRecord, when: datetime) -> None:
        """Run from ``when`` (fresh or after a restart): schedule its finish, timeout, preemption."""
        record.running_since = when
        remaining = max(0.0, record.run_seconds - record.progress)
        if self.executor is not None:
            self.executor.start(record.job)  # the process's exit ends the job
            remaining = float("inf")
        else:
            self._schedule(when + timedelta(seconds=remaining), "finish", record.job.name, record.epoch)
        scheduling = record.job.job_spec.scheduling
        if scheduling and scheduling.timeout:
            left = scheduling.timeout.total_seconds() - record.progress
            if left < remaining:
                self._schedule(when + timedelta(seconds=max(0.0, left)), "timeout", record.job.name, record.epoch)
        rate = self.scenario.spot_preemptions_per_hour
        if record.tier == "spot" and rate > 0:
            after = self.rng.expovariate(rate / 3600.0)
            if after < remaining:
                self._schedule(when + timedelta(seconds=after), "preempt", record.job.name, record.epoch)

    def _stop_running(self, record: JobRecord, when: datetime) -> None:
        if self.executor is not None:
            self.executor.stop(record.job.name)  # SIGTERM: preempted, cancelled or timed out
        if record.running_since is not None:
            record.progress += (when - record.running_since).total_seconds()
            record.running_since = None

    def _end(self, record: JobRecord, state: JobState, when: datetime, error: Status | None = None) -> None:
        self._stop_running(record, when)
        self._release(record)
        # The proto fills endTime and error for SUCCEEDED/FAILED/CANCELLED only (not EXPIRED).
        record.job.end_time = when if state is not S.JOB_STATE_EXPIRED else None
        if error is not None and error.details and self.scenario.variants.error_details == "message_only":
            error = error.model_copy(update={"details": None})
        record.job.error = error
        self._set_state(record, state, when)
        self._admit(when)

    def _end_cancelled(self, record: JobRecord, when: datetime) -> None:
        """A CANCELLING job ends as the scenario's ``cancelOutcome`` says (CANCELLED by default) if
        it was RUNNING when the cancel came: only a job that runs can complete or fail despite a
        cancel; one still waiting for its VMs ends CANCELLED under every variant."""
        ran = len(record.history) >= 2 and record.history[-2][0] == S.JOB_STATE_RUNNING.value
        outcome = self.scenario.variants.cancel_outcome if ran else "cancelled"
        if outcome == "succeeded":  # it completed despite the cancel
            self._end(record, S.JOB_STATE_SUCCEEDED, when)
        elif outcome == "failed":
            self._fail(record, when, cancel_failure())
        else:
            self._end(record, S.JOB_STATE_CANCELLED, when, Status(code=1, message="CANCELED"))

    def _fail(self, record: JobRecord, when: datetime, error: Status) -> None:
        self._end(record, S.JOB_STATE_FAILED, when, error)

    def _preempt(self, record: JobRecord, when: datetime) -> None:
        self.stats["preemptions"] += 1
        self._stop_running(record, when)
        self._release(record)
        if record.restarts >= self.scenario.max_service_restarts:
            self._fail(record, when, _error_status(
                "RESOURCE_EXHAUSTED",
                f"The job was preempted {record.restarts + 1} times: Spot VM capacity was reclaimed "
                f"(STOCKOUT) and the service gave up after {record.restarts} restarts.", "STOCKOUT"))
            return
        record.restarts += 1
        self.stats["serviceRestarts"] += 1
        if self.scenario.variants.spot_restarts == "invisible":
            # The job keeps showing RUNNING (and its capacity) while new VMs come up; the
            # epoch bump drops its pending finish/timeout/preemption events.
            record.holds = self.capacity.try_take(record.location, record.tier, record.demand)
            record.epoch += 1
            self._schedule(when + timedelta(seconds=self.scenario.provisioning_seconds), "restarted",
                           record.job.name, record.epoch)
            return
        self._set_state(record, S.JOB_STATE_QUEUED, when)
        record.eligible_at = when
        self._admit(when)

    # ------------------------------------------------------------------ custom jobs

    def create_custom_job(self, project: str, location: str, body: dict) -> dict:
        try:
            job = CustomJob.model_validate(body)
        except ValidationError as exc:
            raise violations_error(parse_violations(exc)) from None
        found = check_custom_job(job)
        if found:
            raise violations_error(found)
        job = job.model_copy(update={"job_spec": fill_server_defaults(job.job_spec)})  # recorded: diskSpec
        record = self._new_job(project, location, job, self.clock.now(), admitted=False)
        answer = record.wire()  # the create answer has no startTime yet (recorded)
        if answer.get("state") == S.JOB_STATE_QUEUED.value:
            # recorded: the create answers PENDING; the next read shows the job QUEUED
            answer = {**answer, "state": S.JOB_STATE_PENDING.value}
        self._set_admission_start(record)
        return answer

    def _set_admission_start(self, record: JobRecord) -> None:
        """Variant ``startTime: admission``: every read after the create shows startTime =
        createTime + ~0.14 s, whatever the state (as recorded on real Vertex)."""
        if self.scenario.variants.start_time == "admission" and record.job.start_time is None:
            record.job.start_time = record.job.create_time + ADMISSION_START  # type: ignore[operator]
            record._wire = None

    def _new_job(self, project: str, location: str, job: CustomJob, now: datetime, owner: str | None = None,
                 check_quota: bool = True, admitted: bool = True) -> JobRecord:
        """Make a (valid) custom job at emulated time ``now``: for a create, or for a tuning job's
        trial or a pipeline's backing job (``owner``: their name; quota checked at their create)."""
        spec = job.job_spec
        strategy = spec.strategy
        tier, demand = tier_of(strategy), {a.value: n for a, n in spec.accelerator_demand().items()}
        quota = metric_demand(demand, tier != "standard")
        if spec.persistent_resource_id:  # its VMs were counted when the resource was made
            tier, demand, quota = "persistent", self._persistent_demand(project, location, job), {}
        elif check_quota:
            self._check_quota(location, tier, demand)
        reservation = _affinity_reservation(spec)
        if reservation and reservation != "ANY":
            problems = self.reservations.mismatch(reservation, spec)
            zone = reservation.split("/")[3]
            if zone.rsplit("-", 1)[0] != location:
                problems.append(f"reservation {reservation} is in zone {zone}, not in the job's region {location}")
            if problems:  # assumed: Vertex refuses at create a job no VM of the reservation can take
                raise ApiError("FAILED_PRECONDITION", f"jobSpec.workerPoolSpecs.machineSpec.reservationAffinity: "
                                                      f"{'; '.join(problems)}.")
        first = spec.worker_pool_specs[0]
        env = first.env
        try:
            run_seconds = float(env.get(RUN_SECONDS_ENV, self.scenario.run_seconds))
            exit_code = int(env.get(EXIT_CODE_ENV, 0))
        except ValueError:
            raise violations_error([Violation("jobSpec.workerPoolSpecs[0].containerSpec.env",
                                              f"{RUN_SECONDS_ENV} must be a number and {EXIT_CODE_ENV} an integer")])
        job_id = str(next(self._ids))
        job = job.model_copy(update={
            "name": f"projects/{project}/locations/{location}/customJobs/{job_id}",
            "state": S.JOB_STATE_QUEUED, "create_time": now, "update_time": now,
            "start_time": None, "end_time": None, "error": None,
        })
        record = JobRecord(job=job, project=project, location=location, seq=next(self._seq), tier=tier,
                           demand=demand, run_seconds=run_seconds, exit_code=exit_code,
                           eligible_at=now + timedelta(seconds=self.scenario.queue_seconds), owner=owner,
                           quota=quota, reservation=reservation)
        job.state = self._waiting_state(record)
        record.history = [(job.state.value, now)]
        self.jobs[job.name] = record
        self._queue[job.name] = record
        kind = "PERSISTENT_RESOURCE" if tier == "persistent" else strategy.value
        self.stats["jobsCreated"][kind] = self.stats["jobsCreated"].get(kind, 0) + 1
        self._schedule(record.eligible_at, "eligible", job.name, record.epoch)
        self._schedule_stockout(record, now)
        if strategy is Strategy.FLEX_START:
            wait = spec.scheduling.max_wait_duration if spec.scheduling else None
            wait = Scheduling.DEFAULT_MAX_WAIT if wait is None else wait
            if wait.total_seconds() > 0:  # 0 waits forever
                self._schedule(now + wait, "wait_expired", job.name, ANY_EPOCH)
        if admitted:  # a trial's or pipeline's job: no create answer to show first
            self._set_admission_start(record)
        return record

    def _persistent_demand(self, project: str, location: str, job: CustomJob) -> dict[str, int]:
        spec = job.job_spec
        name = self._resource_name(project, location, spec.persistent_resource_id)
        res = self.resources.get(name)
        if res is None:
            raise ApiError("FAILED_PRECONDITION",
                           f"jobSpec.persistentResourceId: persistent resource {name} does not exist.")
        state = res.resource.state
        if state in (PersistentResourceState.ERROR, PersistentResourceState.STOPPING):
            raise ApiError("FAILED_PRECONDITION",
                           f"jobSpec.persistentResourceId: persistent resource {name} is {state.value}.")
        fit = check_persistent_fit(spec, res.resource)
        if fit.mismatches:
            raise violations_error(fit.mismatches, status="FAILED_PRECONDITION")
        demand: dict[str, int] = {}
        for index, pool in spec.active_pools():
            pid = fit.assignment[index]
            demand[pid] = demand.get(pid, 0) + pool.replicas
        return demand

    def get_custom_job(self, name: str) -> dict:
        return self._job(name).wire()

    def _job(self, name: str) -> JobRecord:
        record = self.jobs.get(name)
        if record is None:
            raise ApiError("NOT_FOUND", "The CustomJob does not exist.")  # recorded: no name in it
        return record

    def list_custom_jobs(self, project: str, location: str, filter_text: str = "",
                         page_size: int | None = None, page_token: str = "", read_mask: str = "") -> dict:
        return self._list_page(self.jobs.values(), "customJobs", project, location, filter_text, page_size,
                               page_token, read_mask=read_mask)

    def _list_page(self, records: Any, key: str, project: str, location: str, filter_text: str = "",
                   page_size: int | None = None, page_token: str = "", wire: Any = None,
                   read_mask: str = "", order_by: str = "") -> dict:
        """One page of ``records`` (in creation order; each with seq, project, location,
        filter_record() and wire()) newest first, filtered by the collection ``key``'s filter
        fields, projected to ``read_mask``, under ``key``. Paging as AIP-158 (``paging.py``):
        the token holds the last seq returned and is bound to every argument but the page size;
        under ``variants.listPages: short`` pages come short or empty, with a token, until the end."""
        try:
            predicate = _cached_filter(filter_text or "", key)
        except FilterError as exc:
            raise ApiError("INVALID_ARGUMENT", f"Invalid filter: {exc}") from None
        try:
            mask = parse_read_mask(key, read_mask)
        except FieldMaskError as exc:
            raise ApiError("INVALID_ARGUMENT", f"Invalid readMask: {exc}") from None
        size = coerce_page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        binding = (key, project, location, filter_text or "", read_mask or "", order_by or "")
        before = decode_token(page_token, *binding) if page_token else None
        short = self.scenario.variants.list_pages == "short"
        mine = [r for r in reversed(list(records)) if r.project == project and r.location == location
                and (before is None or r.seq < before)]
        if short and before is None and mine:  # a first page with nothing on it, and a token
            return {"nextPageToken": encode_token(mine[0].seq + 1, *binding)}
        # Newest first; the token is the seq to continue below, so inserts never shift pages.
        looked_at = mine[:short_window(size)] if short else mine
        page, last = [], None
        for record in looked_at:
            if not predicate(record.filter_record()):
                last = record
                continue
            if len(page) == size:
                break
            page.append(record)
            last = record
        body: dict[str, Any] = {key: [project_mask((wire or (lambda r: r.wire()))(r), mask) for r in page]} \
            if page else {}
        if last is not None and last is not mine[-1]:
            body["nextPageToken"] = encode_token(last.seq, *binding)
        return body

    def cancel_custom_job(self, name: str) -> dict:
        record = self._job(name)
        if record.state.is_terminal():
            if self.scenario.variants.cancel_ended == "noop":
                return {}
            raise ApiError("FAILED_PRECONDITION",
                           f"Cannot cancel CustomJob {name}: it is already in state {record.state.value}.")
        self._cancel_job(record, self.clock.now())
        return {}

    def _cancel_job(self, record: JobRecord, now: datetime) -> None:
        if record.state.is_terminal() or record.state is S.JOB_STATE_CANCELLING:
            return
        self.stats["cancels"] += 1
        self._stop_running(record, now)
        self._release(record)
        self._set_state(record, S.JOB_STATE_CANCELLING, now)
        self._schedule(now + timedelta(seconds=self.scenario.cancel_seconds), "cancelled", record.job.name,
                       record.epoch)
        self._admit(now)

    def delete_custom_job(self, name: str) -> dict:
        record = self._job(name)
        if not record.state.is_terminal():
            raise ApiError("FAILED_PRECONDITION",
                           f"CustomJob {name} is in state {record.state.value}; cancel it and wait for it "
                           "to end before deleting it.")
        del self.jobs[name]
        self._queue.pop(name, None)
        return self._done_operation(record.project, record.location, "DeleteOperationMetadata")

    def preempt(self, name: str) -> dict:
        record = self._job(name)
        if record.tier != "spot":
            raise ApiError("FAILED_PRECONDITION", f"{name} is not a SPOT job; only Spot VMs are preempted.")
        if record.state not in (S.JOB_STATE_PENDING, S.JOB_STATE_RUNNING):
            raise ApiError("FAILED_PRECONDITION",
                           f"{name} is {record.state.value}; only a PENDING or RUNNING job can be preempted.")
        self._preempt(record, self.clock.now())
        return record.wire()

    # ------------------------------------------------------------------ persistent resources

    @staticmethod
    def _resource_name(project: str, location: str, resource_id: str | None) -> str:
        return f"projects/{project}/locations/{location}/persistentResources/{resource_id}"

    def create_persistent_resource(self, project: str, location: str, body: dict, resource_id: str,
                                   ready: bool = False) -> dict:
        try:
            resource = PersistentResource.model_validate(body)
        except ValidationError as exc:
            raise violations_error(parse_violations(exc)) from None
        found = check_persistent_resource(resource, resource_id)
        if found:
            raise violations_error(found)
        name = self._resource_name(project, location, resource_id)
        if name in self.resources:
            raise ApiError("ALREADY_EXISTS", f"PersistentResource {name} already exists.")
        now = self.clock.now()
        for pool in resource.resource_pools:
            pool.used_replica_count = 0
        resource = resource.model_copy(update={
            "name": name, "state": PersistentResourceState.PROVISIONING, "create_time": now, "update_time": now,
        })
        # Google names a create's operation under the resource it makes (as Endpoint and Dataset
        # creates do; persistentResources.operations.get in the discovery document): assumed
        op = self._operation(project, location, "CreatePersistentResourceOperationMetadata", parent=name)
        self.resources[name] = ResourceRecord(resource, project, location, op.name)
        if ready:
            self._resource_ready(name, now)
        else:
            delay = timedelta(seconds=self.scenario.resource_provisioning_seconds)
            self._schedule(now + delay, "resource_ready", name)
        return self.operations[op.name].to_api()

    def _resource_ready(self, name: str, when: datetime) -> None:
        record = self.resources.get(name)
        if record is None or record.resource.state is not PersistentResourceState.PROVISIONING:
            return
        record.resource.state = PersistentResourceState.RUNNING
        record.resource.start_time = record.resource.update_time = when
        if record.operation in self.operations:
            op = self.operations[record.operation]
            op.done = True
            op.response = {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.PersistentResource",
                           **record.resource.to_api()}
        self._admit(when)

    def get_persistent_resource(self, name: str) -> dict:
        return self._resource(name).resource.to_api()

    def _resource(self, name: str) -> ResourceRecord:
        record = self.resources.get(name)
        if record is None:
            raise ApiError("NOT_FOUND", f'The PersistentResource "{name}" does not exist.')
        return record

    def list_persistent_resources(self, project: str, location: str, page_size: int | None = None,
                                  page_token: str = "") -> dict:
        size = coerce_page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        binding = ("persistentResources", project, location)
        names = sorted(n for n, r in self.resources.items() if r.project == project and r.location == location)
        start, end = offset_page(page_token, binding, size, len(names), self.scenario.variants.list_pages)
        page = names[start:end]
        body: dict[str, Any] = {"persistentResources": [self.resources[n].resource.to_api() for n in page]} if page else {}
        if end < len(names):
            body["nextPageToken"] = encode_token(end, *binding)
        return body

    def delete_persistent_resource(self, name: str) -> dict:
        record = self._resource(name)
        busy = [r.job.name for r in self.jobs.values()
                if r.tier == "persistent" and r.holds
                and self._resource_name(r.project, r.location, r.job.job_spec.persistent_resource_id) == name]
        if busy:
            raise ApiError("FAILED_PRECONDITION", f"PersistentResource {name} is running jobs: {', '.join(busy)}.")
        del self.resources[name]
        return self._done_operation(record.project, record.location, "DeleteOperationMetadata")

    def set_resource_state(self, name: str, state: str, message: str | None = None) -> dict:
        """Control API: put a persistent resource in a state (ERROR, REBOOTING, RUNNING, ...)."""
        record = self._resource(name)
        new_state = PersistentResourceState(state)
        if not new_state.is_known:
            raise ApiError("INVALID_ARGUMENT", f"unknown persistent resource state {state!r}")
        now = self.clock.now()
        record.resource.state = new_state
        record.resource.update_time = now
        record.resource.error = _error_status("FAILED_PRECONDITION", message) if message else None
        self._admit(now)
        return record.resource.to_api()

    # ------------------------------------------------------------------ operations

    def _operation(self, project: str, location: str, metadata_type: str, parent: str | None = None) -> Operation:
        now = self.clock.now()
        op = Operation(
            name=f"{parent or f'projects/{project}/locations/{location}'}/operations/{next(self._ids)}",
            metadata={"@type": f"type.googleapis.com/google.cloud.aiplatform.v1.{metadata_type}",
                      "genericMetadata": {"createTime": format_timestamp(now), "updateTime": format_timestamp(now)}},
            done=False,
        )
        self.operations[op.name] = op
        return op

    def _done_operation(self, project: str, location: str, metadata_type: str) -> dict:
        op = self._operation(project, location, metadata_type)
        op.done = True
        op.response = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        return op.to_api()

    def get_operation(self, name: str) -> dict:
        op = self.operations.get(name)
        if op is None:
            raise ApiError("NOT_FOUND", f'Operation "{name}" does not exist.')
        return op.to_api()

    # ------------------------------------------------------------------ emulator-only views

    def count(self, rpc: str) -> None:
        requests = self.stats["requests"]
        requests[rpc] = requests.get(rpc, 0) + 1

    def stats_view(self) -> dict:
        by_state: dict[str, int] = {}
        for record in self.jobs.values():
            by_state[record.state.value] = by_state.get(record.state.value, 0) + 1
        return {**self.stats, "jobsByState": by_state, "now": self.clock.now().isoformat(),
                "capacity": self.capacity.snapshot(), **self.job_types_stats()}

    def job_history(self, name: str) -> dict:
        if name not in self.jobs:
            found = self.job_type_history(name)
            if found is not None:
                return found
        record = self._job(name)
        return {"name": name, "restarts": record.restarts, "progressSeconds": record.progress,
                "history": [{"state": s, "time": t.isoformat()} for s, t in record.history]}

    def timeline_rows(self) -> list:
        """Every job, newest first, as timeline rows (for the dashboard and the SVG)."""
        from airflow_gpu_sched.vertex.timeline import Row, segments_from_history

        now = self.clock.now()
        rows = []
        for record in reversed(self.jobs.values()):
            strategy = "PERSISTENT_RESOURCE" if record.tier == "persistent" else record.job.job_spec.strategy.value
            label = f"{record.job.display_name} ({record.job.job_id})"
            rows.append(Row(label, strategy, record.state.value.removeprefix("JOB_STATE_"),
                            segments_from_history(record.history, now)))
        return rows

    def _describe_demand(self, record: JobRecord) -> str:
        return ", ".join(f"{n} x {a}" for a, n in record.demand.items()) + f" in {record.location}"
