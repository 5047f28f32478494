"""What the service fills into a job or a persistent resource it accepts, so every read shows it.

Recorded (tests/data/recorded/cloud_custodian, real Vertex AI v1): a worker pool sent without
``diskSpec`` comes back with ``{"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}``, in a custom
job's ``jobSpec`` and in a tuning job's ``trialJobSpec`` alike. The type is the machine type's
documented default (``DiskSpec.boot_disk_type``: hyperdisk-balanced on A3 Ultra), the size the
documented 100 GB; a pool that sets one of the two keeps it and gets the other.

May import: vertex; never airflow.
"""

from __future__ import annotations

from airflow_gpu_sched.vertex.catalog import default_boot_disk_type
from airflow_gpu_sched.vertex.models import CustomJobSpec, DiskSpec, PersistentResource


def fill_server_defaults(spec: CustomJobSpec) -> CustomJobSpec:
    """A copy of ``spec`` with each active pool's ``diskSpec`` filled as the service does."""
    spec = spec.model_copy(deep=True)
    for _, pool in spec.active_pools():
        pool.disk_spec = _filled_disk(pool.disk_spec, pool.machine_spec.machine_type if pool.machine_spec else None)
    return spec


def fill_resource_defaults(resource: PersistentResource) -> PersistentResource:
    """A copy of ``resource`` whose pools carry an ``id`` and a ``diskSpec`` as the service fills
    them: ``ResourcePool.id`` "is generated automatically" when the user gives none (documented;
    the form ``pool-<n>``, the first n not taken, is assumed); the ``diskSpec``
    defaults as in a job's worker pools (documented; observed: a public provider's code notes that
    reads of a persistent resource "fill in server defaults (disk spec, used replicas)")."""
    resource = resource.model_copy(deep=True)
    taken, n = {pool.id for pool in resource.resource_pools if pool.id}, 0
    for pool in resource.resource_pools:
        while not pool.id:
            pool.id = f"pool-{n}" if f"pool-{n}" not in taken else None
            n += 1
        taken.add(pool.id)
        pool.disk_spec = _filled_disk(pool.disk_spec, pool.machine_spec.machine_type if pool.machine_spec else None)
    return resource


def _filled_disk(disk: DiskSpec | None, machine_type: str | None) -> DiskSpec:
    disk = disk or DiskSpec()
    return disk.model_copy(update={"boot_disk_type": disk.boot_disk_type or default_boot_disk_type(machine_type),
                                   "boot_disk_size_gb": disk.boot_disk_size_gb or DiskSpec.DEFAULT_SIZE_GB})
