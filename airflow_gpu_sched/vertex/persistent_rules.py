"""How a custom job fits a persistent resource, and the rules for creating one.

A job on a persistent resource runs on its VMs: each worker pool must match one of the
resource's pools exactly (machine type, accelerator, boot disk type) and fit in its size
(else the job can never run there) and its free replicas (else it waits). The violations are
those of :mod:`rules` (field path from the root, the rule in words).

May import: vertex; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_gpu_sched.vertex import catalog
from airflow_gpu_sched.vertex.models import CustomJobSpec, DiskSpec, MachineSpec, PersistentResource
from airflow_gpu_sched.vertex.rules import PERSISTENT_RESOURCE_ID, Violation, check_labels, check_machine


@dataclass(frozen=True)
class PoolShortage:
    """A worker pool that fits its resource pool, but not in the replicas free right now."""

    path: str
    resource_pool_id: str
    wanted: int
    free: int


@dataclass
class PersistentFit:
    """How a job spec fits a persistent resource.

    ``mismatches``: the spec can never run there (fix the spec or the resource).
    ``shortages``: it fits, but the matching pools are busy now (wait for replicas).
    """

    mismatches: list[Violation] = field(default_factory=list)
    shortages: list[PoolShortage] = field(default_factory=list)
    assignment: dict[int, str] = field(default_factory=dict)  # worker pool index -> resource pool id

    @property
    def fits(self) -> bool:
        return not self.mismatches

    @property
    def runs_now(self) -> bool:
        return not self.mismatches and not self.shortages


def _pool_key(machine: MachineSpec | None, disk: DiskSpec | None) -> tuple:
    # Compare effective disk types: a pool with no diskSpec has its machine type's default
    # (pd-ssd, or hyperdisk-balanced on A3 Ultra), on the job's side and the resource's alike.
    machine = machine or MachineSpec()
    return (machine.machine_type, machine.accelerator_type, machine.accelerator_count or None,
            catalog.effective_boot_disk_type(machine.machine_type, disk.boot_disk_type if disk else None))


def check_persistent_fit(spec: CustomJobSpec, resource: PersistentResource,
                         path: str = "jobSpec") -> PersistentFit:
    """Match every worker pool to a resource pool: machine type, accelerator and disk type
    exactly; replica count within the pool's size (never fits) and its free replicas (busy)."""
    fit = PersistentFit()
    wanted_per_pool: dict[str, int] = {}
    for index, pool in spec.active_pools():
        pool_path = f"{path}.workerPoolSpecs[{index}]"
        key = _pool_key(pool.machine_spec, pool.disk_spec)
        match = next((rp for rp in resource.resource_pools
                      if _pool_key(rp.machine_spec, rp.disk_spec) == key),
                     None)
        if match is None:
            machine_type, accelerator, count, disk = key
            offered = "; ".join(
                f"{rp.id}: {_describe(_pool_key(rp.machine_spec, rp.disk_spec))}"
                for rp in resource.resource_pools) or "none"
            fit.mismatches.append(Violation(
                f"{pool_path}.machineSpec",
                f"no resource pool of {resource.name or 'the persistent resource'} matches "
                f"{_describe(key)} (machine type, accelerator and boot disk type must match exactly; "
                f"pools: {offered})",
            ))
            continue
        fit.assignment[index] = match.id or ""
        wanted_per_pool[match.id or ""] = wanted_per_pool.get(match.id or "", 0) + pool.replicas
        if wanted_per_pool[match.id or ""] > match.capacity:
            fit.mismatches.append(Violation(
                f"{pool_path}.replicaCount",
                f"asks for {wanted_per_pool[match.id or '']} replicas but resource pool {match.id!r} "
                f"holds at most {match.capacity}",
            ))
        elif wanted_per_pool[match.id or ""] > match.free_replicas:
            fit.shortages.append(PoolShortage(pool_path, match.id or "", wanted_per_pool[match.id or ""],
                                              match.free_replicas))
    return fit


def _describe(key: tuple) -> str:
    machine_type, accelerator, count, disk = key
    gpus = f" with {count} x {accelerator.value}" if accelerator else ""
    return f"{machine_type}{gpus} on {disk}"


def check_persistent_resource(resource: PersistentResource, resource_id: str) -> list[Violation]:
    """Rules for creating a persistent resource."""
    found = []
    if not PERSISTENT_RESOURCE_ID.fullmatch(resource_id or ""):
        found.append(Violation("persistentResourceId",
                               f"{resource_id!r} must be 1-63 lowercase letters, digits and '-', "
                               "starting with a letter and not ending with '-'"))
    if not resource.resource_pools:
        found.append(Violation("resourcePools", "at least one resource pool is required"))
    for index, pool in enumerate(resource.resource_pools):
        path = f"resourcePools[{index}]"
        found += check_machine(pool.machine_spec, f"{path}.machineSpec")
        if pool.capacity < 1:
            found.append(Violation(f"{path}.replicaCount", "must be at least 1"))
        if pool.autoscaling_spec is not None:
            found += _check_autoscaling(pool.autoscaling_spec, pool.replica_count, f"{path}.autoscalingSpec")
    found += check_labels(resource.labels or {}, "labels")
    return found


def _check_autoscaling(spec, replicas: int | None, path: str) -> list[Violation]:
    """``ResourcePool.AutoscalingSpec`` (persistent_resource.proto): min > 0 for a persistent
    resource, min <= replicaCount and min < max; max >= replicaCount and max > min."""
    found = []
    low, high = spec.min_replica_count, spec.max_replica_count
    if low is not None:
        if low < 1:
            found.append(Violation(f"{path}.minReplicaCount", f"must be at least 1 for a persistent resource "
                                                              f"(got {low})"))
        elif replicas is not None and low > replicas:
            found.append(Violation(f"{path}.minReplicaCount", f"must not exceed replicaCount ({low} > {replicas})"))
    if high is not None:
        if replicas is not None and high < replicas:
            found.append(Violation(f"{path}.maxReplicaCount", f"must be at least replicaCount ({high} < {replicas})"))
        if low is not None and high <= low:
            found.append(Violation(f"{path}.maxReplicaCount",
                                   f"must be greater than minReplicaCount ({high} <= {low})"))
    return found
