"""The rules a Vertex AI custom job must follow, in one place.

The operators (before any GPU is requested), the clients (before a create is sent) and the
emulator (when it answers a create with 400) all call these functions, so a bad spec is
rejected everywhere with the same words. Each :class:`Violation` names the field path from
the CustomJob root, camelCase as on the wire (``jobSpec.workerPoolSpecs[1].machineSpec.
acceleratorType``), and says the rule in words a user can act on.

The rules of the other resources build on these: a job's fit on a persistent resource and the
rules for creating one in :mod:`persistent_rules`, tuning jobs and training pipelines (and the
operators' arguments for them) in :mod:`job_type_rules`.

Parsing (:mod:`airflow_gpu_sched.vertex.models`) stays lenient on purpose: a response from the
service must always parse, even when it would fail these rules.

May import: vertex; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from airflow_gpu_sched.vertex import catalog
from airflow_gpu_sched.vertex.enums import Strategy
from airflow_gpu_sched.vertex.models import CustomJob, CustomJobSpec, MachineSpec, WorkerPoolSpec

MAX_DISPLAY_NAME = 128
MAX_LABEL_LENGTH = 63
# "Each resource can have multiple labels, up to a maximum of 64" (Resource Manager, Requirements for
# labels: https://cloud.google.com/resource-manager/docs/labels-overview#requirements; the v1 protos'
# labels comments point there: "See https://goo.gl/xmQnxf")
MAX_LABELS = 64
FLEX_START_MAX_TIMEOUT = timedelta(days=7)
BOOT_DISK_SIZE_GB = (100, 64000)
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]*")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]*")
PERSISTENT_RESOURCE_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Violation:
    path: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}"


class SpecError(ValueError):
    """A job spec broke one or more rules; ``violations`` lists every one of them."""

    def __init__(self, violations: list[Violation], what: str = "custom job"):
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"invalid {what} ({len(self.violations)} problem(s)):\n{lines}")


def parse_violations(error: ValidationError) -> list[Violation]:
    """A body that does not even parse, as violations with wire (camelCase) paths."""
    found = []
    for item in error.errors():
        path = ""
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else ("." if path else "") + to_camel(str(part))
        found.append(Violation(path or "body", item["msg"]))
    return found


# --------------------------------------------------------------------------- custom jobs


def check_custom_job(job: CustomJob) -> list[Violation]:
    """Every rule the job breaks (empty when it is valid)."""
    found = check_display_name(job.display_name)
    found += check_labels(job.labels or {}, "labels")
    found += check_job_spec(job.job_spec, "jobSpec")
    return found


def validate_custom_job(job: CustomJob) -> CustomJob:
    """Return the job unchanged, or raise :class:`SpecError` listing every violation."""
    found = check_custom_job(job)
    if found:
        raise SpecError(found)
    return job


def check_display_name(name: str | None, path: str = "displayName") -> list[Violation]:
    length = len(name or "")
    if not 1 <= length <= MAX_DISPLAY_NAME:
        return [Violation(path, f"must be 1 to {MAX_DISPLAY_NAME} characters (got {length})")]
    return []


def check_labels(labels: dict[str, str], path: str = "labels") -> list[Violation]:
    if len(labels) > MAX_LABELS:  # one violation, not one per label of a huge map
        return [Violation(path, f"a resource has at most {MAX_LABELS} labels (got {len(labels)})")]
    found = []
    for key, value in labels.items():
        if not (len(key) <= MAX_LABEL_LENGTH and _LABEL_KEY.fullmatch(key)):
            found.append(Violation(
                f"{path}.{key}",
                f"label keys are 1-{MAX_LABEL_LENGTH} characters of lowercase letters, digits, '_' "
                "and '-', starting with a letter",
            ))
        if not (len(value) <= MAX_LABEL_LENGTH and _LABEL_VALUE.fullmatch(value)):
            found.append(Violation(
                f"{path}.{key}",
                f"label values are at most {MAX_LABEL_LENGTH} characters of lowercase letters, "
                f"digits, '_' and '-' (got {value!r})",
            ))
    return found


def check_job_spec(spec: CustomJobSpec, path: str = "jobSpec") -> list[Violation]:
    pools_path = f"{path}.workerPoolSpecs"
    if not spec.worker_pool_specs:
        return [Violation(pools_path, "at least one worker pool is required")]
    found: list[Violation] = []
    if spec.worker_pool_specs[0].is_empty():
        found.append(Violation(f"{pools_path}[0]", "the first pool (the primary replica) cannot be empty"))
    for index, pool in spec.active_pools():
        found += _check_pool(pool, index, f"{pools_path}[{index}]")
    found += _check_scheduling(spec, path)
    strategy = spec.strategy
    if strategy is Strategy.FLEX_START:
        found += _check_flex_start(spec, path)
    elif strategy is Strategy.SPOT:
        found += _check_spot(spec, path)
    elif not strategy.is_known:
        found.append(Violation(
            f"{path}.scheduling.strategy",
            f"unknown strategy {strategy.value!r}: use STANDARD, SPOT or FLEX_START",
        ))
    if spec.persistent_resource_id is not None:
        found += _check_persistent_resource_reference(spec, path)
    return found


def _check_pool(pool: WorkerPoolSpec, index: int, path: str) -> list[Violation]:
    found: list[Violation] = []
    has_container, has_package = pool.container_spec is not None, pool.python_package_spec is not None
    if has_container == has_package:
        found.append(Violation(path, "set exactly one of containerSpec or pythonPackageSpec"))
    if pool.container_spec is not None and not pool.container_spec.image_uri:
        found.append(Violation(f"{path}.containerSpec.imageUri", "is required: the training container image"))
    if pool.python_package_spec is not None:
        package = pool.python_package_spec
        for attr, wire in (("executor_image_uri", "executorImageUri"), ("python_module", "pythonModule"),
                           ("package_uris", "packageUris")):
            if not getattr(package, attr):
                found.append(Violation(f"{path}.pythonPackageSpec.{wire}", "is required for a Python package task"))
    if pool.replica_count is not None and pool.replica_count < 1:
        found.append(Violation(f"{path}.replicaCount", f"must be at least 1 (got {pool.replica_count})"))
    elif index == 0 and pool.replicas != 1:
        found.append(Violation(
            f"{path}.replicaCount",
            f"the first pool is the primary replica and must have replicaCount 1 (got {pool.replicas}); "
            "put further workers in workerPoolSpecs[1]",
        ))
    found += check_machine(pool.machine_spec, f"{path}.machineSpec")
    if pool.disk_spec is not None:
        disk, disk_path = pool.disk_spec, f"{path}.diskSpec"
        if disk.boot_disk_type is not None and disk.boot_disk_type not in catalog.BOOT_DISK_TYPES:
            found.append(Violation(f"{disk_path}.bootDiskType",
                                   f"must be one of {sorted(catalog.BOOT_DISK_TYPES)} (got {disk.boot_disk_type!r})"))
        low, high = BOOT_DISK_SIZE_GB
        if disk.boot_disk_size_gb is not None and not low <= disk.boot_disk_size_gb <= high:
            found.append(Violation(f"{disk_path}.bootDiskSizeGb",
                                   f"must be between {low} and {high} GB (got {disk.boot_disk_size_gb})"))
    return found


def check_machine(machine: MachineSpec | None, path: str) -> list[Violation]:
    """A machine type and the accelerators it carries (a job's pool or a resource pool)."""
    if machine is None or not machine.machine_type:
        return [Violation(f"{path}.machineType", "is required (for example 'a2-highgpu-1g')")]
    accelerator, count = machine.accelerator_type, machine.accelerator_count
    if (accelerator is None) != (count is None):
        return [Violation(f"{path}.acceleratorType",
                          "set acceleratorType and acceleratorCount together, or neither")]
    carried = catalog.accelerators_for(machine.machine_type)
    if accelerator is None:
        builtin = catalog.BUILT_IN_GPUS.get(machine.machine_type)
        if builtin:
            return [Violation(f"{path}.acceleratorType",
                              f"{machine.machine_type!r} carries {builtin.counts[0]} x {builtin.accelerator.value}: "
                              "set acceleratorType and acceleratorCount to match")]
        if machine.machine_type in catalog.TPU_MACHINES:
            offered = "; ".join(f"{a.value} x {list(c)}" for a, c in carried.items())
            return [Violation(f"{path}.acceleratorType",
                              f"{machine.machine_type!r} is a TPU machine type: set acceleratorType and "
                              f"acceleratorCount ({offered})")]
        return []
    if not accelerator.is_known or accelerator.value == "ACCELERATOR_TYPE_UNSPECIFIED":
        return [Violation(f"{path}.acceleratorType", f"{accelerator.value!r} is not a known accelerator type")]
    if accelerator not in carried:
        hint = ", ".join(a.value for a in carried) or "none (a CPU-only machine type)"
        return [Violation(f"{path}.acceleratorType",
                          f"accelerator {accelerator.value!r} is not supported for machine type "
                          f"{machine.machine_type!r} (it takes: {hint})")]
    if count not in carried[accelerator]:
        return [Violation(f"{path}.acceleratorCount",
                          f"{machine.machine_type!r} takes {accelerator.value} in counts of "
                          f"{list(carried[accelerator])} (got {count})")]
    return []


def _check_scheduling(spec: CustomJobSpec, path: str) -> list[Violation]:
    scheduling = spec.scheduling
    if scheduling is None:
        return []
    found = []
    if scheduling.timeout is not None and scheduling.timeout <= timedelta(0):
        found.append(Violation(f"{path}.scheduling.timeout", "must be greater than 0"))
    if scheduling.max_wait_duration is not None and scheduling.max_wait_duration < timedelta(0):
        found.append(Violation(f"{path}.scheduling.maxWaitDuration",
                               "must be 0 (wait forever) or more"))
    return found


def _check_flex_start(spec: CustomJobSpec, path: str) -> list[Violation]:
    found = []
    allowed = ", ".join(sorted(a.value for a in catalog.FLEX_START_ACCELERATORS))
    for index, pool in spec.active_pools():
        machine = pool.machine_spec
        accelerator = machine.accelerator_type if machine else None
        if accelerator not in catalog.FLEX_START_ACCELERATORS:
            got = accelerator.value if accelerator else "no GPU"
            found.append(Violation(
                f"{path}.workerPoolSpecs[{index}].machineSpec.acceleratorType",
                f"FLEX_START (Dynamic Workload Scheduler) needs GPUs of type {allowed} (got {got})",
            ))
    timeout = spec.scheduling.timeout if spec.scheduling else None
    if timeout is not None and timeout > FLEX_START_MAX_TIMEOUT:
        found.append(Violation(f"{path}.scheduling.timeout",
                               f"FLEX_START jobs may run at most 7 days (got {timeout})"))
    pools = spec.active_pools()
    if pools:
        first_index, first = pools[0]
        for index, pool in pools[1:]:
            if _machine_config(pool) != _machine_config(first):
                found.append(Violation(
                    f"{path}.workerPoolSpecs[{index}].machineSpec",
                    f"FLEX_START needs the same machine configuration in every pool: this pool differs "
                    f"from workerPoolSpecs[{first_index}].machineSpec",
                ))
    return found


def _machine_config(pool: WorkerPoolSpec) -> tuple:
    machine = pool.machine_spec or MachineSpec()
    return machine.machine_type, machine.accelerator_type, machine.accelerator_count


def _check_spot(spec: CustomJobSpec, path: str) -> list[Violation]:
    found = []
    for index, pool in spec.active_pools():
        machine = pool.machine_spec or MachineSpec()
        machine_path = f"{path}.workerPoolSpecs[{index}].machineSpec"
        if machine.accelerator_type is not None and machine.accelerator_type.is_tpu:
            found.append(Violation(f"{machine_path}.acceleratorType",
                                   "SPOT cannot be used with TPUs; use STANDARD for TPU training"))
        elif machine.machine_type and catalog.machine_series(machine.machine_type) not in catalog.SPOT_MACHINE_SERIES:
            found.append(Violation(f"{machine_path}.machineType",
                                   f"SPOT training runs on {catalog.spot_series_text()} only "
                                   f"(got {machine.machine_type!r})"))
    return found


def _check_persistent_resource_reference(spec: CustomJobSpec, path: str) -> list[Violation]:
    found = []
    if not PERSISTENT_RESOURCE_ID.fullmatch(spec.persistent_resource_id or ""):
        found.append(Violation(f"{path}.persistentResourceId",
                               f"{spec.persistent_resource_id!r} is not a persistent resource id: 1-63 "
                               "lowercase letters, digits and '-', starting with a letter"))
    if spec.strategy is not Strategy.STANDARD:
        # Our choice: a persistent resource's VMs already exist, so a capacity strategy has no meaning.
        found.append(Violation(f"{path}.scheduling.strategy",
                               f"a job on a persistent resource runs on its VMs; leave strategy unset "
                               f"or STANDARD (got {spec.strategy.value})"))
    return found
