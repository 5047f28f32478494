"""The rules a Vertex AI custom job must follow, in one place.

The operators (before any GPU is requested), the clients (before a create is sent) and the
emulator (when it answers a create with 400) all call these functions, so a bad spec is
rejected everywhere with the same words. Each :class:`Violation` names the field path from
the CustomJob root, camelCase as on the wire (``jobSpec.workerPoolSpecs[1].machineSpec.
acceleratorType``), and says the rule in words a user can act on.

Parsing (:mod:`airflow_gpu_sched.vertex.models`) stays lenient on purpose: a response from the
service must always parse, even when it would fail these rules.

May import: vertex; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from airflow_gpu_sched.vertex import catalog
from airflow_gpu_sched.vertex.models import (
    CUSTOM_TASK_DEFINITION,
    CustomJob,
    CustomJobSpec,
    DiskSpec,
    GoalType,
    MachineSpec,
    PersistentResource,
    SearchAlgorithm,
    Strategy,
    WorkerPoolSpec,
)

if TYPE_CHECKING:  # imported where used: the operators import this module at DAG-parse time
    from airflow_gpu_sched.vertex.job_type_models import (
        HyperparameterTuningJob,
        ParameterSpec,
        StudySpec,
        TrainingPipeline,
    )

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
MODEL_ID = re.compile(r"^[a-z_][a-z0-9_-]{0,62}$")
MODEL_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/models/[^/@]+$")


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
    found: list[Violation] = []
    name = job.display_name or ""
    if not 1 <= len(name) <= MAX_DISPLAY_NAME:
        found.append(Violation("displayName", f"must be 1 to {MAX_DISPLAY_NAME} characters (got {len(name)})"))
    found += check_labels(job.labels or {}, "labels")
    found += check_job_spec(job.job_spec, "jobSpec")
    return found


def validate_custom_job(job: CustomJob) -> CustomJob:
    """Return the job unchanged, or raise :class:`SpecError` listing every violation."""
    found = check_custom_job(job)
    if found:
        raise SpecError(found)
    return job


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
    found += _check_machine(pool.machine_spec, f"{path}.machineSpec")
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


def _check_machine(machine: MachineSpec | None, path: str) -> list[Violation]:
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


# --------------------------------------------------------------------------- persistent resources


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
        found += _check_machine(pool.machine_spec, f"{path}.machineSpec")
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


# --------------------------------------------------------------------------- tuning jobs and pipelines


def _check_display_name(name: str | None, path: str = "displayName") -> list[Violation]:
    length = len(name or "")
    if not 1 <= length <= MAX_DISPLAY_NAME:
        return [Violation(path, f"must be 1 to {MAX_DISPLAY_NAME} characters (got {length})")]
    return []


def check_tuning_counts(max_trial_count: int | None, parallel_trial_count: int | None,
                        max_failed_trial_count: int | None = None) -> list[Violation]:
    """``maxTrialCount`` >= 1; 1 <= ``parallelTrialCount`` <= ``maxTrialCount``;
    ``maxFailedTrialCount`` >= 0 (0: the service decides, see docs/emulator.md)."""
    found = []
    if max_trial_count is None or max_trial_count < 1:
        found.append(Violation("maxTrialCount", f"is required and must be at least 1 (got {max_trial_count})"))
    if parallel_trial_count is None or parallel_trial_count < 1:
        found.append(Violation("parallelTrialCount",
                               f"is required and must be at least 1 (got {parallel_trial_count})"))
    elif max_trial_count is not None and max_trial_count >= 1 and parallel_trial_count > max_trial_count:
        found.append(Violation("parallelTrialCount",
                               f"must not exceed maxTrialCount ({parallel_trial_count} > {max_trial_count})"))
    if max_failed_trial_count is not None and max_failed_trial_count < 0:
        found.append(Violation("maxFailedTrialCount", f"must be 0 or more (got {max_failed_trial_count})"))
    return found


def check_study_spec(study: StudySpec, path: str = "studySpec") -> list[Violation]:
    """At least one metric (id, goal MAXIMIZE or MINIMIZE) and one parameter (id, exactly one
    value spec with a valid range or list); ids unique; a known algorithm."""
    found: list[Violation] = []
    if not study.metrics:
        found.append(Violation(f"{path}.metrics", "at least one metric is required (metricId and goal)"))
    seen: set[str] = set()
    for index, metric in enumerate(study.metrics):
        where = f"{path}.metrics[{index}]"
        if not metric.metric_id or any(c.isspace() for c in metric.metric_id):
            found.append(Violation(f"{where}.metricId", "is required and must not contain whitespace"))
        elif metric.metric_id in seen:
            found.append(Violation(f"{where}.metricId", f"{metric.metric_id!r} is used twice"))
        seen.add(metric.metric_id or "")
        if metric.goal not in (GoalType.MAXIMIZE, GoalType.MINIMIZE):
            got = metric.goal.value if metric.goal else "nothing"
            found.append(Violation(f"{where}.goal", f"must be MAXIMIZE or MINIMIZE (got {got})"))
    if not study.parameters:
        found.append(Violation(f"{path}.parameters", "at least one parameter to tune is required"))
    seen = set()
    for index, parameter in enumerate(study.parameters):
        where = f"{path}.parameters[{index}]"
        if not parameter.parameter_id or any(c.isspace() for c in parameter.parameter_id):
            found.append(Violation(f"{where}.parameterId", "is required and must not contain whitespace"))
        elif parameter.parameter_id in seen:
            found.append(Violation(f"{where}.parameterId", f"{parameter.parameter_id!r} is used twice"))
        seen.add(parameter.parameter_id or "")
        found += _check_parameter(parameter, where)
    if study.algorithm is not None and not study.algorithm.is_known:
        found.append(Violation(f"{path}.algorithm",
                               f"unknown algorithm {study.algorithm.value!r}: use GRID_SEARCH or RANDOM_SEARCH"))
    if study.algorithm is SearchAlgorithm.GRID_SEARCH:
        for index, parameter in enumerate(study.parameters):
            if parameter.double_value_spec is not None:
                found.append(Violation(f"{path}.parameters[{index}].doubleValueSpec",
                                       "GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL parameters"))
    return found


def _check_parameter(parameter: ParameterSpec, where: str) -> list[Violation]:
    specs = parameter.value_specs
    if len(specs) != 1:
        return [Violation(where, "set exactly one of doubleValueSpec, integerValueSpec, categoricalValueSpec "
                                 f"or discreteValueSpec (got {', '.join(specs) or 'none'})")]
    spec = specs[0]
    if spec in ("doubleValueSpec", "integerValueSpec"):
        value = parameter.double_value_spec or parameter.integer_value_spec
        if value.min_value is None or value.max_value is None:  # type: ignore[union-attr]
            return [Violation(f"{where}.{spec}", "minValue and maxValue are required")]
        if value.min_value > value.max_value:  # type: ignore[union-attr, operator]
            return [Violation(f"{where}.{spec}.minValue",
                              f"must not exceed maxValue ({value.min_value} > {value.max_value})")]  # type: ignore[union-attr]
        if parameter.scale_type is not None and parameter.scale_type.value.endswith("LOG_SCALE") \
                and value.min_value <= 0:  # type: ignore[union-attr, operator]
            return [Violation(f"{where}.scaleType", "a log scale needs minValue > 0")]
    else:
        values = (parameter.categorical_value_spec or parameter.discrete_value_spec).values  # type: ignore[union-attr]
        if not values:
            return [Violation(f"{where}.{spec}.values", "at least one value is required")]
        if spec == "discreteValueSpec" and list(values) != sorted(set(values)):
            return [Violation(f"{where}.{spec}.values", "must be distinct and in increasing order")]
    return []


def check_tuning_job(job: HyperparameterTuningJob) -> list[Violation]:
    """Every rule a HyperparameterTuningJob breaks: display name, labels, trial counts, the
    study spec and the trial job spec (paths from the tuning job root: ``trialJobSpec...``)."""
    found = _check_display_name(job.display_name)
    found += check_labels(job.labels or {}, "labels")
    found += check_tuning_counts(job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count)
    found += check_study_spec(job.study_spec, "studySpec")
    found += check_job_spec(job.trial_job_spec, "trialJobSpec")
    return found


def validate_tuning_job(job: HyperparameterTuningJob) -> HyperparameterTuningJob:
    found = check_tuning_job(job)
    if found:
        raise SpecError(found, "hyperparameter tuning job")
    return job


def check_training_pipeline(pipeline: TrainingPipeline) -> list[Violation]:
    """Rules for a custom-task TrainingPipeline: the custom task definition, task inputs that
    are a valid CustomJobSpec (paths ``trainingTaskInputs...``), a model to upload with a display
    name and a serving image, a well-formed ``parentModel``/``modelId``."""
    found = _check_display_name(pipeline.display_name)
    found += check_labels(pipeline.labels or {}, "labels")
    if pipeline.training_task_definition != CUSTOM_TASK_DEFINITION:
        found.append(Violation("trainingTaskDefinition",
                               f"only the custom task {CUSTOM_TASK_DEFINITION} is supported "
                               f"(got {pipeline.training_task_definition!r})"))
    if not pipeline.training_task_inputs:
        found.append(Violation("trainingTaskInputs", "is required: a CustomJobSpec (workerPoolSpecs, scheduling, ...)"))
    else:
        try:
            spec = CustomJobSpec.model_validate(pipeline.training_task_inputs)
        except ValidationError as exc:
            found += [Violation(f"trainingTaskInputs.{v.path}", v.rule) for v in parse_violations(exc)]
        else:
            found += check_job_spec(spec, "trainingTaskInputs")
    model = pipeline.model_to_upload
    if model is None:
        found.append(Violation("modelToUpload", "is required: the model's displayName and serving containerSpec"))
    else:
        if not model.display_name:
            found.append(Violation("modelToUpload.displayName", "is required: the registered model's name"))
        else:
            found += _check_display_name(model.display_name, "modelToUpload.displayName")
        if model.container_spec is None or not model.container_spec.image_uri:
            found.append(Violation("modelToUpload.containerSpec.imageUri",
                                   "is required: the serving container image of the model"))
        found += check_labels(model.labels or {}, "modelToUpload.labels")
    if pipeline.parent_model is not None and not MODEL_NAME.fullmatch(pipeline.parent_model):
        found.append(Violation("parentModel", f"must be a model resource name like "
                                              f"'projects/P/locations/L/models/ID' (got {pipeline.parent_model!r})"))
    if pipeline.model_id is not None and not MODEL_ID.fullmatch(pipeline.model_id):
        found.append(Violation("modelId", "up to 63 characters of [a-z0-9_-], not starting with a digit or '-' "
                                          f"(got {pipeline.model_id!r})"))
    return found


def validate_training_pipeline(pipeline: TrainingPipeline) -> TrainingPipeline:
    found = check_training_pipeline(pipeline)
    if found:
        raise SpecError(found, "training pipeline")
    return pipeline


# --------------------------------------------------------------------------- operator arguments (same rules)

_COUNT_ARGS = {"maxTrialCount": "max_trial_count", "parallelTrialCount": "parallel_trial_count",
               "maxFailedTrialCount": "max_failed_trial_count"}


def _with_argument_names(rule: str) -> str:
    for wire, argument in _COUNT_ARGS.items():
        rule = rule.replace(wire, argument)
    return rule


def check_tuning_options(study_spec: StudySpec | dict | None, max_trial_count: int | None,
                         parallel_trial_count: int | None,
                         max_failed_trial_count: int | None = None) -> list[Violation]:
    """The tuning rules of :func:`check_tuning_job`, for operator arguments: paths name the
    argument (``study_spec.metrics[0].goal``, ``parallel_trial_count``). ``parallel_trial_count``
    None means 1."""
    found = [Violation(_COUNT_ARGS.get(v.path, v.path), _with_argument_names(v.rule))
             for v in check_tuning_counts(max_trial_count, 1 if parallel_trial_count is None else parallel_trial_count,
                                          max_failed_trial_count)]
    if study_spec is None:
        return found + [Violation("study_spec", "is required: metrics (metricId, goal) and parameters to tune")]
    from airflow_gpu_sched.vertex.job_type_models import StudySpec

    if isinstance(study_spec, StudySpec):
        study = study_spec
    else:
        try:
            study = StudySpec.model_validate(study_spec)
        except ValidationError as exc:
            return found + [Violation(f"study_spec.{v.path}", v.rule) for v in parse_violations(exc)]
    return found + [Violation("study_spec" + v.path.removeprefix("studySpec"), v.rule)
                    for v in check_study_spec(study, "studySpec")]


def check_pipeline_options(model_display_name: str | None, model_serving_image_uri: str | None,
                           parent_model: str | None = None) -> list[Violation]:
    """The pipeline rules of :func:`check_training_pipeline` for operator arguments."""
    found = []
    if not model_display_name:
        found.append(Violation("model_display_name", "is required: the registered model's name"))
    else:
        found += [Violation("model_display_name", v.rule) for v in _check_display_name(model_display_name)]
    if not model_serving_image_uri:
        found.append(Violation("model_serving_image_uri", "is required: the serving container image of the model"))
    if parent_model is not None and not MODEL_NAME.fullmatch(parent_model):
        found.append(Violation("parent_model", f"must be a model resource name like "
                                               f"'projects/P/locations/L/models/ID' (got {parent_model!r})"))
    return found
