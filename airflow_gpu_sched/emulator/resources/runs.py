"""A custom job's life cycle: waiting for capacity, admission, provisioning, running, ending.

Every step is an event at its own emulated time (``store.py``), so timestamps are exact whatever
the polling rhythm, and nothing runs in the background. What a job holds while admitted:
``holds.py``; the API (create, list, cancel, ...): ``custom_jobs.py``.

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

import json
from collections.abc import Callable
from datetime import datetime, timedelta

from airflow_gpu_sched.emulator.api_errors import cancel_failure
from airflow_gpu_sched.emulator.resources.holds import Holds
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.store import ANY_EPOCH, Store, cancelled_status, error_status
from airflow_gpu_sched.vertex.enums import JobState, Strategy
from airflow_gpu_sched.vertex.models import Scheduling, Status
from airflow_gpu_sched.vertex.wire_scalars import format_duration

S = JobState
Watcher = Callable[[JobRecord, datetime], None]


class JobRuns:
    """The queue of waiting jobs and every transition of a custom job. A tuning job or pipeline
    that owns jobs :meth:`watch`-es them: it is told of each state change at its own time."""

    def __init__(self, store: Store, holds: Holds):
        self.store = store
        self.scenario = store.scenario
        self.holds = holds
        self.queue: dict[str, JobRecord] = {}  # jobs in QUEUED, waiting for capacity
        self.stockouts: dict[tuple[str, str], float] = {}  # (location, accelerator) -> standardStockoutSeconds
        self._watchers: list[Watcher] = []
        store.freed = self.admit
        store.on("capacity", lambda key, _epoch, when: self.set_capacity(*json.loads(key), when))
        events: dict[str, Callable[[JobRecord, datetime], None]] = {
            "eligible": lambda record, when: self.admit(when),
            "provisioned": self._start_running,
            "finish": self._finish,
            "preempt": self.preempt,
            "stockout": self._stockout,
            "wait_expired": self._wait_expired,
            "timeout": self._timeout,
            "cancelled": self._end_cancelled,
            "reservation_full": self._reservation_full,
            "restarted": self._restarted,
        }
        for kind, handler in events.items():
            store.on(kind, self._for_job(handler))

    def _for_job(self, handler: Callable[[JobRecord, datetime], None]) -> Callable[[str, int, datetime], None]:
        def run(name: str, epoch: int, when: datetime) -> None:
            record = self.store.jobs.get(name)
            if record is not None and epoch in (record.epoch, ANY_EPOCH):  # else: stale
                handler(record, when)
        return run

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def collect_exits(self, now: datetime) -> None:
        """--execute: a process that ended decides its job."""
        executor = self.store.executor
        if executor is None:
            return
        for name, status in executor.finished():
            record = self.store.jobs.get(name)
            if record is not None and record.state is S.JOB_STATE_RUNNING:
                record.exit_code = status
                self._finish(record, now)

    # ------------------------------------------------------------------ a new job

    def add(self, record: JobRecord, now: datetime) -> None:
        """A new job (in its waiting state) joins the queue, with its admission, stockout and
        FLEX_START wait events."""
        name = record.job.name
        self.store.jobs[name] = record
        self.queue[name] = record
        self.store.schedule(record.eligible_at, "eligible", name, record.epoch)
        self._schedule_stockout(record, now)
        spec = record.job.job_spec
        if spec.strategy is Strategy.FLEX_START:
            wait = spec.scheduling.max_wait_duration if spec.scheduling else None
            wait = Scheduling.DEFAULT_MAX_WAIT if wait is None else wait
            if wait.total_seconds() > 0:  # 0 waits forever
                self.store.schedule_after(now, wait.total_seconds(), "wait_expired", name, ANY_EPOCH)

    def waiting_state(self, record: JobRecord) -> JobState:
        """The state a job waiting for capacity shows (a FLEX_START one: the scenario's variant)."""
        if record.job.job_spec.strategy is Strategy.FLEX_START:
            return JobState(self.scenario.variants.flex_start_waiting_state)
        return S.JOB_STATE_QUEUED

    def forget(self, name: str) -> None:
        """A deleted job."""
        del self.store.jobs[name]
        self.queue.pop(name, None)

    # ------------------------------------------------------------------ capacity settings and stockouts

    def set_capacity(self, location: str, accelerator: str, tiers: dict, stockout: dict, when: datetime) -> None:
        self.holds.capacity.set(location, accelerator, **tiers)
        if "standard_stockout_seconds" in stockout:
            seconds = stockout["standard_stockout_seconds"]
            if seconds is None:
                self.stockouts.pop((location, accelerator), None)
            else:
                if seconds < 0:
                    raise ValueError(f"standardStockoutSeconds must be 0 or more (got {seconds})")
                self.stockouts[(location, accelerator)] = float(seconds)
                for record in list(self.queue.values()):  # jobs already waiting get the new bound too
                    if record.location == location and accelerator in record.demand:
                        self._schedule_stockout(record, when)
        self.admit(when)

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
            self.store.schedule(when, "stockout", record.job.name, record.epoch)

    def _stockout(self, record: JobRecord, when: datetime) -> None:
        """A STANDARD job still QUEUED at its stockout time: failed by the service after its own
        retries if capacity is what it lacks; one waiting for quota keeps waiting (checked again later)."""
        if record.state is not S.JOB_STATE_QUEUED:
            return
        if not self.holds.quotas.fits(record.project, record.location, record.quota):
            again = max(1.0, self._stockout_seconds(record) or 0.0)  # never the same instant: no event loop
            self.store.schedule(when + timedelta(seconds=again), "stockout", record.job.name, record.epoch)
            return
        # observed: openreview/openreview-expertise#401; the code (8) and no ErrorInfo are assumed
        self._fail(record, when, error_status("RESOURCE_EXHAUSTED",
                                              f"Resources are insufficient in region: {record.location}"))

    # ------------------------------------------------------------------ events that end a job

    def _finish(self, record: JobRecord, when: datetime) -> None:
        if record.exit_code:
            injected = record.failure.message if record.failure is not None else None
            self._fail(record, when, error_status(
                "INVALID_ARGUMENT", injected or
                f"The replica workerpool0-0 exited with a non-zero status of {record.exit_code}. "
                f"To find out more about why your job exited please check the logs: {record.logs_url()}"))
        else:
            self._end(record, S.JOB_STATE_SUCCEEDED, when)

    def _wait_expired(self, record: JobRecord, when: datetime) -> None:
        if record.job.name not in self.queue:
            return
        if self.scenario.variants.flex_start_expiry == "expired":
            self._end(record, S.JOB_STATE_EXPIRED, when)
            return
        if self.scenario.variants.flex_start_expiry == "cancelled":
            self._end(record, S.JOB_STATE_CANCELLED, when, cancelled_status())
            return
        wait = record.job.job_spec.scheduling.max_wait_duration  # type: ignore[union-attr]
        self._fail(record, when, error_status(
            "DEADLINE_EXCEEDED",
            f"The job could not get its resources ({record.describe_demand()}) within "
            f"scheduling.maxWaitDuration ({format_duration(wait)}): the FLEX_START capacity "
            "wait expired.", "FLEX_START_WAIT_EXPIRED"))

    def _timeout(self, record: JobRecord, when: datetime) -> None:
        if self.scenario.variants.timeout_outcome == "cancelled":
            self._end(record, S.JOB_STATE_CANCELLED, when, cancelled_status())
            return
        timeout = record.job.job_spec.scheduling.timeout  # type: ignore[union-attr]
        self._fail(record, when, error_status(
            "DEADLINE_EXCEEDED",
            f"The job ran longer than scheduling.timeout ({format_duration(timeout)}).", "JOB_TIMEOUT"))

    def _reservation_full(self, record: JobRecord, when: datetime) -> None:
        if record.job.name not in self.queue:
            return
        # variant "failed" (assumed: Google documents no behaviour for a full reservation)
        found = self.holds.reservations.get(record.reservation or "")["specificReservation"]
        self._fail(record, when, error_status(
            "RESOURCE_EXHAUSTED", f"Resources are insufficient in reservation {record.reservation}: "
            f"{found['inUseCount']} of {found['count']} VMs are in use.", "ZONE_RESOURCE_POOL_EXHAUSTED"))

    def _restarted(self, record: JobRecord, when: datetime) -> None:
        if record.state is S.JOB_STATE_RUNNING:
            self._run_segment(record, when)  # an invisible restart is over: the run resumes

    # ------------------------------------------------------------------ transitions

    def _set_state(self, record: JobRecord, state: JobState, when: datetime) -> None:
        """``state`` QUEUED means "waiting for capacity": the record joins the queue and shows
        its waiting state."""
        if state is S.JOB_STATE_QUEUED:
            self.queue[record.job.name] = record
            state = self.waiting_state(record)
        else:
            self.queue.pop(record.job.name, None)
        record.job.state = state
        record.job.update_time = when
        record.epoch += 1
        record.history.append((state.value, when))
        record.changed()
        if record.owner is not None:  # a trial's or a pipeline's custom job moved
            for watcher in self._watchers:
                watcher(record, when)

    def admit(self, when: datetime) -> None:
        """Give free capacity to waiting jobs, oldest first (a job that does not fit is skipped)."""
        for record in sorted(self.queue.values(), key=lambda r: r.seq):
            if record.eligible_at <= when and self.holds.take(record):
                self._set_state(record, S.JOB_STATE_PENDING, when)
                spec = record.job.job_spec
                delay = (self.scenario.persistent_provisioning_seconds if spec.persistent_resource_id
                         else self.scenario.provisioning_seconds)
                self.store.schedule(when + timedelta(seconds=delay), "provisioned", record.job.name, record.epoch)

    def _start_running(self, record: JobRecord, when: datetime) -> None:
        self._set_state(record, S.JOB_STATE_RUNNING, when)
        if record.job.start_time is None:
            record.job.start_time = when
        self._run_segment(record, when)

    def _run_segment(self, record: JobRecord, when: datetime) -> None:
        """Run from ``when`` (fresh or after a restart): schedule its finish, timeout, preemption."""
        record.running_since = when
        remaining = max(0.0, record.run_seconds - record.progress)
        if self.store.executor is not None:
            self.store.executor.start(record.job)  # the process's exit ends the job
            remaining = float("inf")
        else:
            self.store.schedule_after(when, remaining, "finish", record.job.name, record.epoch)
        scheduling = record.job.job_spec.scheduling
        if scheduling and scheduling.timeout:
            left = scheduling.timeout.total_seconds() - record.progress
            if left < remaining:
                self.store.schedule_after(when, max(0.0, left), "timeout", record.job.name,
                                    record.epoch)
        rate = self.scenario.spot_preemptions_per_hour
        if record.tier == "spot" and rate > 0:
            after = self.store.rng.expovariate(rate / 3600.0)
            if after < remaining:
                self.store.schedule_after(when, after, "preempt", record.job.name, record.epoch)

    def _stop_running(self, record: JobRecord, when: datetime) -> None:
        if self.store.executor is not None:
            self.store.executor.stop(record.job.name)  # SIGTERM: preempted, cancelled or timed out
        if record.running_since is not None:
            record.progress += (when - record.running_since).total_seconds()
            record.running_since = None

    def _end(self, record: JobRecord, state: JobState, when: datetime, error: Status | None = None) -> None:
        self._stop_running(record, when)
        self.holds.release(record)
        # The proto fills endTime and error for SUCCEEDED/FAILED/CANCELLED only (not EXPIRED).
        record.job.end_time = when if state is not S.JOB_STATE_EXPIRED else None
        if error is not None and error.details and self.scenario.variants.error_details == "message_only":
            error = error.model_copy(update={"details": None})
        record.job.error = error
        self._set_state(record, state, when)
        self.admit(when)

    def _end_cancelled(self, record: JobRecord, when: datetime) -> None:
        """A CANCELLING job ends as the scenario's ``cancelOutcome`` says (CANCELLED by default) if
        it was RUNNING when the cancel came: only a job that runs can complete or fail despite a
        cancel; one still waiting for its VMs ends CANCELLED under every variant."""
        outcome = self.cancel_outcome(record.history)
        if outcome == "succeeded":  # it completed despite the cancel
            self._end(record, S.JOB_STATE_SUCCEEDED, when)
        elif outcome == "failed":
            self._fail(record, when, cancel_failure())
        else:
            self._end(record, S.JOB_STATE_CANCELLED, when, cancelled_status())

    def cancel_outcome(self, history: list[tuple[str, datetime]]) -> str:
        """How a cancelled job ends: the scenario's ``cancelOutcome`` if it was RUNNING when the
        cancel came (its state before CANCELLING), else "cancelled"."""
        ran = len(history) >= 2 and history[-2][0] == S.JOB_STATE_RUNNING.value
        return self.scenario.variants.cancel_outcome if ran else "cancelled"

    def _fail(self, record: JobRecord, when: datetime, error: Status) -> None:
        self._end(record, S.JOB_STATE_FAILED, when, error)

    def preempt(self, record: JobRecord, when: datetime) -> None:
        self.store.stats["preemptions"] += 1
        self._stop_running(record, when)
        self.holds.release(record)
        if record.restarts >= self.scenario.max_service_restarts:
            self._fail(record, when, error_status(
                "RESOURCE_EXHAUSTED",
                f"The job was preempted {record.restarts + 1} times: Spot VM capacity was reclaimed "
                f"(STOCKOUT) and the service gave up after {record.restarts} restarts.", "STOCKOUT"))
            return
        record.restarts += 1
        self.store.stats["serviceRestarts"] += 1
        if self.scenario.variants.spot_restarts == "invisible":
            # The job keeps showing RUNNING (and its capacity) while new VMs come up; the
            # epoch bump drops its pending finish/timeout/preemption events.
            record.holds = self.holds.capacity.try_take(record.location, record.tier, record.demand)
            record.epoch += 1
            self.store.schedule(when + timedelta(seconds=self.scenario.provisioning_seconds), "restarted",
                                record.job.name, record.epoch)
            return
        self._set_state(record, S.JOB_STATE_QUEUED, when)
        record.eligible_at = when
        self.admit(when)

    def cancel(self, record: JobRecord, now: datetime) -> None:
        """CANCELLING now, CANCELLED ``cancelSeconds`` later (or as ``cancelOutcome`` says)."""
        if record.state.is_terminal() or record.state is S.JOB_STATE_CANCELLING:
            return
        self.store.stats["cancels"] += 1
        self._stop_running(record, now)
        self.holds.release(record)
        self._set_state(record, S.JOB_STATE_CANCELLING, now)
        self.store.schedule(now + timedelta(seconds=self.scenario.cancel_seconds), "cancelled", record.job.name,
                            record.epoch)
        self.admit(now)

    def hold_in(self, record: JobRecord, state: JobState, when: datetime) -> None:
        """Control API: the job leaves its life cycle for ``state`` (PAUSED, a state this code does
        not know) and stays there, holding nothing, until cancelled (its pending events dropped)."""
        self._stop_running(record, when)
        self.holds.release(record)
        self._set_state(record, state, when)
        self.admit(when)
