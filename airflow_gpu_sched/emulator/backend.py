"""The emulator's state: one object per resource over a shared store and clock
(``emulator/resources/``), built here and wired together; a reset builds them anew.

The HTTP app (``app.py``) calls the resources' methods (``backend.custom_jobs.create``, ...);
what the control API changes (capacity, quota, a preemption, a resource's state) and the
emulator-only views (stats, a job's history, the timeline) are methods here.

Job life cycle and its variants: ``resources/runs.py``; tuning jobs, training pipelines and
models: ``resources/tuning_jobs.py``, ``resources/pipelines.py``, ``resources/model_registry.py``.

May import: vertex, drawing, emulator; never airflow.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from airflow_gpu_sched.emulator.resources.custom_jobs import CustomJobs
from airflow_gpu_sched.emulator.resources.holds import Holds
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.model_registry import Models
from airflow_gpu_sched.emulator.resources.operations import Operations
from airflow_gpu_sched.emulator.resources.persistent_resources import PersistentResources, ResourceRecord
from airflow_gpu_sched.emulator.resources.pipelines import TrainingPipelines
from airflow_gpu_sched.emulator.resources.quota_infos import QuotaInfos
from airflow_gpu_sched.emulator.resources.runs import JobRuns
from airflow_gpu_sched.emulator.resources.store import Store
from airflow_gpu_sched.emulator.resources.tuning_jobs import TuningJobs
from airflow_gpu_sched.emulator.scenario import Scenario

__all__ = ["Backend", "JobRecord", "ResourceRecord"]  # JobRecord: where emulator/nights.py found it


class Backend:
    """All emulated state. Not thread-safe: the HTTP app calls it from one event loop."""

    def __init__(self, scenario: Scenario | None = None):
        scenario = scenario or Scenario()
        # The execution settings of the constructor's scenario (the CLI's --execute): a reset over
        # HTTP keeps them and may not set them (control_api.py EXECUTION_FIELDS; docs/security.md).
        self.execution = {"execute": scenario.execute, "execute_root": scenario.execute_root,
                          "execute_workdir": scenario.execute_workdir}
        self.executor: Any = None
        self.reset(scenario)

    def reset(self, scenario: Scenario | None = None) -> None:
        if self.executor is not None:
            self.executor.stop_all()
        self.scenario = scenario = scenario or Scenario()
        self.executor = None
        if scenario.execute:
            import tempfile

            from airflow_gpu_sched.emulator.executor import LocalExecutor

            root = scenario.execute_root or tempfile.mkdtemp(prefix="vertex_emulator_")
            self.executor = LocalExecutor(root, scenario.execute_workdir)
        self.store = store = Store(scenario, self.executor)
        self.clock, self.rng, self.stats = store.clock, store.rng, store.stats
        self.faults = scenario.faults
        self.operations = Operations(store)
        self.persistent_resources = PersistentResources(store, self.operations)
        self.holds = Holds(store, self.persistent_resources)
        self.capacity, self.quotas, self.reservations = self.holds.capacity, self.holds.quotas, self.holds.reservations
        self.runs = JobRuns(store, self.holds)
        self.custom_jobs = CustomJobs(store, self.runs, self.holds, self.persistent_resources, self.operations)
        self.tuning_jobs = TuningJobs(self.custom_jobs)
        self.models = Models(store)
        self.pipelines = TrainingPipelines(self.custom_jobs, self.models)
        self.quota_infos = QuotaInfos(store, self.quotas)
        for quota in scenario.quota:
            self.set_quota(quota.model_dump())
        for limit in scenario.quotas:
            self.quotas.set(limit.metric, limit.region, limit.limit)
        for seeded in scenario.reservations:
            self.reservations.insert(seeded.project, seeded.zone, dict(seeded.reservation), self.clock.now())
        for setting in scenario.capacity:
            self.apply_capacity(setting.model_dump(exclude_unset=True), at_seconds=setting.at_seconds)
        for seeded in scenario.persistent_resources:
            self.persistent_resources.create(seeded.project, seeded.location, seeded.resource, seeded.id, ready=True)

    @property
    def jobs(self) -> dict[str, JobRecord]:
        """Every custom job, in creation order."""
        return self.store.jobs

    @property
    def resources(self) -> dict[str, ResourceRecord]:
        return self.persistent_resources.records

    def advance(self) -> None:
        """Apply every event due by now, in time order, each at its own time."""
        now = self.clock.now()
        self.runs.collect_exits(now)
        self.store.run_due(now)

    # ------------------------------------------------------------------ control API

    def apply_capacity(self, setting: dict, at_seconds: float | None = None) -> None:
        """A capacity setting (keys as CapacitySetting's fields; a tier left out is unchanged;
        ``standard_stockout_seconds`` left out is unchanged, None clears it)."""
        location, accelerator = setting["location"], setting["accelerator_type"]
        tiers = {t: setting.get(t) for t in ("standard", "spot", "flex_start")}
        stockout = {k: setting[k] for k in ("standard_stockout_seconds",) if k in setting}
        if at_seconds is not None:
            when = self.clock.now() + timedelta(seconds=at_seconds)
            self.store.schedule(when, "capacity", json.dumps([location, accelerator, tiers, stockout]))
            return
        self.runs.set_capacity(location, accelerator, tiers, stockout, self.clock.now())

    def set_quota_limit(self, metric: str, region: str | None, limit: int) -> None:
        """A Cloud Quotas limit; a raised limit admits jobs that were waiting for it."""
        self.quotas.set(metric, region, limit)
        self.runs.admit(self.clock.now())

    def set_quota(self, setting: dict) -> None:
        """The older per-accelerator form; writes the same store as the Cloud Quotas view."""
        for kind in ("standard", "preemptible"):
            if setting.get(kind) is not None:
                self.quotas.set_for_accelerator(setting["location"], setting["accelerator_type"],
                                                kind == "preemptible", setting[kind])
        self.runs.admit(self.clock.now())

    def preempt(self, name: str) -> dict:
        return self.custom_jobs.preempt(name)

    def set_resource_state(self, name: str, state: str, message: str | None = None) -> dict:
        if "/customJobs/" in name:  # a job held in PAUSED or a state unknown to the client
            return self.custom_jobs.set_state(name, state)
        return self.persistent_resources.set_state(name, state, message)

    # ------------------------------------------------------------------ emulator-only views

    def count(self, rpc: str) -> None:
        requests = self.stats["requests"]
        requests[rpc] = requests.get(rpc, 0) + 1

    def stats_view(self) -> dict:
        return {**self.stats, "jobsByState": _by_state(r.job for r in self.jobs.values()),
                "now": self.clock.now().isoformat(), "capacity": self.capacity.snapshot(),
                "hyperparameterTuningJobsByState": _by_state(r.job for r in self.tuning_jobs.records.values()),
                "trainingPipelinesByState": _by_state(r.pipeline for r in self.pipelines.records.values()),
                "models": len(self.models.records)}

    def job_history(self, name: str) -> dict:
        if name in self.tuning_jobs.records:
            return self.tuning_jobs.history(name)
        if name in self.pipelines.records:
            return self.pipelines.history(name)
        return self.custom_jobs.history(name)

    def timeline_rows(self) -> list:
        """Every job, newest first, as timeline rows (for the dashboard and the SVG)."""
        from airflow_gpu_sched.drawing.timeline import Row, segments_from_history

        now = self.clock.now()
        return [Row(f"{record.job.display_name} ({record.job.job_id})", record.strategy_name,
                    record.state.value.removeprefix("JOB_STATE_"), segments_from_history(record.history, now))
                for record in reversed(self.jobs.values())]


def _by_state(resources: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for resource in resources:
        counts[resource.state.value] = counts.get(resource.state.value, 0) + 1
    return counts
