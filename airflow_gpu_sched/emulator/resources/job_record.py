"""A custom job's record: the job as Google shows it plus what the emulator tracks about it
(capacity tier, what it holds, progress, restarts, its state history).

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_gpu_sched.vertex.enums import JobState
from airflow_gpu_sched.vertex.models import CustomJob


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
    failure: Any = None  # an injected scenario.JobFailure: how it ends (its message, its log lines)
    _wire: dict | None = None

    @property
    def state(self) -> JobState:
        return self.job.state  # type: ignore[return-value]

    @property
    def strategy_name(self) -> str:
        """Its strategy as the stats and the timeline name it."""
        return "PERSISTENT_RESOURCE" if self.tier == "persistent" else self.job.job_spec.strategy.value

    def wire(self) -> dict:
        if self._wire is None:
            self._wire = self.job.to_api()
        return self._wire

    def changed(self) -> None:
        """Its job was changed in place: the next read builds the wire form again."""
        self._wire = None

    def filter_record(self) -> dict:
        return {"display_name": self.job.display_name, "state": self.state.value,
                "create_time": self.job.create_time, "labels": self.job.labels or {}}

    def vms(self) -> int:
        """VMs the job holds of a reservation: one per replica."""
        return sum(pool.replicas for _, pool in self.job.job_spec.active_pools())

    def describe_demand(self) -> str:
        return ", ".join(f"{n} x {a}" for a, n in self.demand.items()) + f" in {self.location}"

    def logs_url(self) -> str:
        """The Cloud Logging link Vertex puts after "please check the logs:" in a failed job's error
        (observed in public job logs; the real one carries the project number)."""
        job_id = self.job.job_id
        return (f"https://console.cloud.google.com/logs/viewer?project={self.project}"
                f"&resource=ml_job%2Fjob_id%2F{job_id}&advancedFilter=resource.type%3D%22ml_job%22"
                f"%0Aresource.labels.job_id%3D%22{job_id}%22")


def affinity_reservation(spec: Any) -> str | None:
    """The reservation the job's pools name (a SPECIFIC_RESERVATION), "ANY", or None."""
    from airflow_gpu_sched.vertex.reservations import reserved_name

    for _, pool in spec.active_pools():
        affinity = pool.machine_spec.reservation_affinity if pool.machine_spec else None
        if affinity and affinity.get("reservationAffinityType") in ("ANY_RESERVATION", 2):
            return "ANY"
        if reserved_name(affinity):
            return reserved_name(affinity)
    return None
