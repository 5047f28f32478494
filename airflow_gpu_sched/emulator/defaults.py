"""What the service fills into a job it accepts, so every read shows it.

Recorded (tests/data/recorded/cloud_custodian, real Vertex AI v1): a worker pool sent without
``diskSpec`` comes back with ``{"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}``, in a custom
job's ``jobSpec`` and in a tuning job's ``trialJobSpec`` alike. The type is the machine type's
documented default (``DiskSpec.boot_disk_type``: hyperdisk-balanced on A3 Ultra), the size the
documented 100 GB; a pool that sets one of the two keeps it and gets the other.

May import: vertex; never airflow.
"""

from __future__ import annotations

from airflow_gpu_sched.vertex.catalog import default_boot_disk_type
from airflow_gpu_sched.vertex.models import CustomJobSpec, DiskSpec


def fill_server_defaults(spec: CustomJobSpec) -> CustomJobSpec:
    """A copy of ``spec`` with each active pool's ``diskSpec`` filled as the service does."""
    spec = spec.model_copy(deep=True)
    for _, pool in spec.active_pools():
        machine = pool.machine_spec.machine_type if pool.machine_spec else None
        disk = pool.disk_spec or DiskSpec()
        pool.disk_spec = disk.model_copy(update={
            "boot_disk_type": disk.boot_disk_type or default_boot_disk_type(machine),
            "boot_disk_size_gb": disk.boot_disk_size_gb or DiskSpec.DEFAULT_SIZE_GB})
    return spec
