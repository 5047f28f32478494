"""What a custom job holds while it is admitted: GPUs of a region's capacity tier and the
project's quota, or VMs of a reservation and quota, or replicas of a persistent resource's pools.
Both or nothing: a job that cannot get all it needs takes nothing and waits.

Quota (emulator/quotas.py): a job alone over a limit is refused at create (429); one over it only
next to what other jobs hold waits QUEUED until the quota is free.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.capacity import CapacityLedger
from airflow_gpu_sched.emulator.quotas import QuotaStore, metric_demand
from airflow_gpu_sched.emulator.reservations import ReservationStore
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.persistent_resources import PersistentResources
from airflow_gpu_sched.emulator.resources.store import Store


class Holds:
    def __init__(self, store: Store, persistent: PersistentResources):
        scenario = store.scenario
        self.store = store
        self.persistent = persistent
        self.capacity = CapacityLedger(scenario.default_capacity)
        self.quotas = QuotaStore(scenario.default_gpu_quota)
        self.reservations = ReservationStore()

    def quota_refusal(self, location: str, tier: str, demand: dict[str, int]) -> str | None:
        """Google's 429 message when the job alone needs more than a limit (SPOT and FLEX_START
        draw on the preemptible quota), else None: a job that fits waits for quota when admitted."""
        metric = self.quotas.refused(location, metric_demand(demand, tier != "standard"))
        return f"The following quota metrics exceed quota limits: {metric}" if metric else None

    def check_quota(self, location: str, tier: str, demand: dict[str, int]) -> None:
        refusal = self.quota_refusal(location, tier, demand)
        if refusal:
            raise ApiError("RESOURCE_EXHAUSTED", refusal)

    def take(self, record: JobRecord) -> bool:
        if record.tier == "persistent":
            pools = self.persistent.pools(record)
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

    def release(self, record: JobRecord) -> None:
        if not record.holds:
            return
        record.holds = False
        if record.tier == "persistent":
            pools = self.persistent.pools(record) or {}
            for pid, n in record.demand.items():
                if pid in pools:
                    pools[pid].used_replica_count = max(0, (pools[pid].used_replica_count or 0) - n)
        elif record.reserved:
            self.reservations.give_back(record.reserved, record.vms())
            record.reserved = None
            self.quotas.give_back(record.project, record.location, record.quota)
        else:
            self.capacity.give_back(record.location, record.tier, record.demand)
            self.quotas.give_back(record.project, record.location, record.quota)

    def _take_reserved(self, record: JobRecord) -> bool:
        """VMs of the job's reservation (its named one, or any matching one for ANY), with quota."""
        if not self.quotas.fits(record.project, record.location, record.quota):
            return False
        name = self.reservations.choose(record.reservation or "", record.location, record.job.job_spec, record.vms())
        if name is None:
            if record.reservation != "ANY" and self.store.scenario.variants.reservation_full == "failed":
                self.store.schedule(self.store.clock.now(), "reservation_full", record.job.name, record.epoch)
            return False
        self.reservations.take(name, record.vms())
        self.quotas.take(record.project, record.location, record.quota)
        record.reserved, record.holds = name, True
        return True
