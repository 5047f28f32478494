"""Persistent resources: reserved VMs (resource pools) that custom jobs run on.

A create answers an operation (named under the resource: assumed) that is done when the
resource is RUNNING, ``resourceProvisioningSeconds`` later. A job on it takes replicas of the
pools its worker pools fit (``vertex.persistent_rules.check_persistent_fit``); it waits while the pools
are busy or the resource is not RUNNING. The control API can put a resource in any state.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_gpu_sched.emulator.api_errors import ApiError, violations_error
from airflow_gpu_sched.emulator.defaults import fill_resource_defaults
from airflow_gpu_sched.emulator.resources.job_record import JobRecord
from airflow_gpu_sched.emulator.resources.listing import offset_list
from airflow_gpu_sched.emulator.resources.operations import Operations
from airflow_gpu_sched.emulator.resources.store import Store, error_status, find, parse_valid
from airflow_gpu_sched.vertex.enums import PersistentResourceState
from airflow_gpu_sched.vertex.models import CustomJob, PersistentResource
from airflow_gpu_sched.vertex.persistent_rules import check_persistent_fit, check_persistent_resource
from airflow_gpu_sched.vertex.rules import Violation

R = PersistentResourceState
# The one updatable field, as the proto names it and in its JSON (lowerCamelCase) form
REPLICA_COUNT_PATHS = ("resource_pools.replica_count", "resourcePools.replicaCount")


@dataclass
class ResourceRecord:
    resource: PersistentResource
    project: str
    location: str
    operation: str | None = None
    pending_counts: list[int] | None = None  # a PATCH's replica counts, applied when its update ends


def resource_name(project: str, location: str, resource_id: str | None) -> str:
    return f"projects/{project}/locations/{location}/persistentResources/{resource_id}"


class PersistentResources:
    def __init__(self, store: Store, operations: Operations):
        self.store = store
        self.operations = operations
        self.records: dict[str, ResourceRecord] = {}
        store.on("resource_ready", lambda name, _epoch, when: self._ready(name, when))
        store.on("resource_updated", lambda name, _epoch, when: self._updated(name, when))

    def create(self, project: str, location: str, body: dict, resource_id: str, ready: bool = False) -> dict:
        resource = parse_valid(PersistentResource, body, check_persistent_resource, resource_id)
        name = resource_name(project, location, resource_id)
        if name in self.records:
            raise ApiError("ALREADY_EXISTS", f"PersistentResource {name} already exists.")
        now = self.store.clock.now()
        resource = fill_resource_defaults(resource)  # pool ids and disks, as the server fills them
        for pool in resource.resource_pools:
            pool.used_replica_count = 0
        resource = resource.model_copy(update={
            "name": name, "state": R.PROVISIONING, "create_time": now, "update_time": now,
        })
        # Google names a create's operation under the resource it makes (as Endpoint and Dataset
        # creates do; persistentResources.operations.get in the discovery document): assumed
        op = self.operations.start(project, location, "CreatePersistentResourceOperationMetadata", parent=name)
        self.records[name] = ResourceRecord(resource, project, location, op.name)
        if ready:
            self._ready(name, now)
        else:
            delay = timedelta(seconds=self.store.scenario.resource_provisioning_seconds)
            self.store.schedule(now + delay, "resource_ready", name)
        return self.operations.get(op.name)

    def patch(self, name: str, body: dict, update_mask: str) -> dict:
        """``persistentResources.patch``: only ``resource_pools.replica_count`` may be updated
        (observed: other paths are refused, "Unrecognized path"; Google's SDK sends the whole
        resource with that one path, its pools in the resource's order). Answers an operation
        (UpdatePersistentResourceOperationMetadata, named under the resource: assumed); the
        resource is UPDATING for ``resourceProvisioningSeconds``, then RUNNING with the new
        counts and the operation done with it."""
        record = self._record(name)
        paths = [p.strip() for p in update_mask.split(",") if p.strip()]
        if not paths:
            raise violations_error([Violation("updateMask", "is required: the only field that can be updated "
                                                            "is resource_pools.replica_count")])
        unknown = [p for p in paths if p not in REPLICA_COUNT_PATHS]
        if unknown:
            raise violations_error([Violation("updateMask", f"Unrecognized path {p!r}: the only field that can be "
                                                            "updated is resource_pools.replica_count")
                                    for p in unknown])
        if record.resource.state is not R.RUNNING:
            raise ApiError("FAILED_PRECONDITION", f"PersistentResource {name} is {record.resource.state.value}: "
                                                  "only a RUNNING persistent resource can be updated.")
        counts = self._new_counts(record.resource, body)
        updated = record.resource.model_copy(deep=True)
        for pool, count in zip(updated.resource_pools, counts):
            pool.replica_count = count
        found = check_persistent_resource(updated, name.rsplit("/", 1)[1])
        if found:
            raise violations_error(found)
        now = self.store.clock.now()
        record.resource.state, record.resource.update_time = R.UPDATING, now
        record.pending_counts = counts
        op = self.operations.start(record.project, record.location, "UpdatePersistentResourceOperationMetadata",
                                   parent=name)
        record.operation = op.name
        delay = timedelta(seconds=self.store.scenario.resource_provisioning_seconds)
        self.store.schedule(now + delay, "resource_updated", name)
        return self.operations.get(op.name)

    @staticmethod
    def _new_counts(resource: PersistentResource, body: dict) -> list[int]:
        """Each pool's ``replicaCount`` from the body's pools, matched by position (ids, when
        sent, must be the resource's, in its order)."""
        sent = parse_valid(PersistentResource, body, lambda _r: []).resource_pools
        if len(sent) != len(resource.resource_pools):
            raise violations_error([Violation("resourcePools", f"must list the resource's {len(resource.resource_pools)} "
                                                               f"pools in order, not {len(sent)}")])
        counts = []
        for index, (mine, theirs) in enumerate(zip(resource.resource_pools, sent)):
            if theirs.id and theirs.id != mine.id:
                raise violations_error([Violation(f"resourcePools[{index}].id",
                                                  f"is {mine.id!r} in the resource, not {theirs.id!r}")])
            counts.append(mine.replica_count if theirs.replica_count is None else theirs.replica_count)
        return counts

    def _updated(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is None or record.resource.state is not R.UPDATING or record.pending_counts is None:
            return
        for pool, count in zip(record.resource.resource_pools, record.pending_counts):
            pool.replica_count = count
        record.pending_counts = None
        record.resource.state, record.resource.update_time = R.RUNNING, when
        self.operations.finish(record.operation, {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.PersistentResource",
            **record.resource.to_api()}, when)
        self.store.freed(when)

    def _ready(self, name: str, when: datetime) -> None:
        record = self.records.get(name)
        if record is None or record.resource.state is not R.PROVISIONING:
            return
        record.resource.state = R.RUNNING
        record.resource.start_time = record.resource.update_time = when
        self.operations.finish(record.operation, {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.PersistentResource",
            **record.resource.to_api()}, when)
        self.store.freed(when)

    def _record(self, name: str) -> ResourceRecord:
        return find(self.records, name, f'The PersistentResource "{name}" does not exist.')

    def get(self, name: str) -> dict:
        return self._record(name).resource.to_api()

    def list(self, project: str, location: str, page_size: int | None = None, page_token: str = "") -> dict:
        names = sorted(n for n, r in self.records.items() if r.project == project and r.location == location)
        return offset_list(names, "persistentResources", ("persistentResources", project, location), page_size,
                           page_token, self.store.scenario.variants.list_pages,
                           lambda n: self.records[n].resource.to_api())

    def delete(self, name: str) -> dict:
        record = self._record(name)
        busy = [r.job.name for r in self.store.jobs.values()
                if r.tier == "persistent" and r.holds and self._name_of(r) == name]
        if busy:
            raise ApiError("FAILED_PRECONDITION", f"PersistentResource {name} is running jobs: {', '.join(busy)}.")
        del self.records[name]
        return self.operations.deleted(record.project, record.location)

    def set_state(self, name: str, state: str, message: str | None = None) -> dict:
        """Control API: put a persistent resource in a state (ERROR, REBOOTING, RUNNING, ...)."""
        record = self._record(name)
        new_state = R(state)
        if not new_state.is_known:
            raise ApiError("INVALID_ARGUMENT", f"unknown persistent resource state {state!r}")
        now = self.store.clock.now()
        record.resource.state = new_state
        record.resource.update_time = now
        record.resource.error = error_status("FAILED_PRECONDITION", message) if message else None
        self.store.freed(now)
        return record.resource.to_api()

    # ------------------------------------------------------------------ the jobs on them

    @staticmethod
    def _name_of(job: JobRecord) -> str:
        return resource_name(job.project, job.location, job.job.job_spec.persistent_resource_id)

    def demand(self, project: str, location: str, job: CustomJob) -> dict[str, int]:
        """Replicas per pool id the job takes; refused when the resource is missing, broken or
        has no pools its worker pools fit."""
        spec = job.job_spec
        name = resource_name(project, location, spec.persistent_resource_id)
        res = self.records.get(name)
        if res is None:
            raise ApiError("FAILED_PRECONDITION",
                           f"jobSpec.persistentResourceId: persistent resource {name} does not exist.")
        state = res.resource.state
        if state in (R.ERROR, R.STOPPING):
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

    def pools(self, job: JobRecord) -> dict | None:
        """The pools (by id) of the job's resource when it is RUNNING, else None."""
        res = self.records.get(self._name_of(job))
        if res is None or res.resource.state is not R.RUNNING:
            return None
        return {p.id: p for p in res.resource.resource_pools}
