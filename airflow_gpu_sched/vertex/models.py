"""The one typed picture of the Vertex AI v1 REST surface this project uses: its resources as
pydantic models (the other job types' in :mod:`job_type_models`), over the scalar types of
:mod:`wire_scalars` and the closed sets of :mod:`enums`.

Wire format (see ``shared/vertex-api.md``):
- camelCase on the wire, snake_case in Python (``populate_by_name`` accepts both);
- int64 fields (``replicaCount`` ...) are read from strings or numbers and written as strings;
- durations are read from ``"1800s"``, a number of seconds, a ``timedelta`` or shorthand such
  as ``"2h"``/``"1h30m"`` and written as ``"1800s"``;
- enums are read from their names or their numbers (Google's own REST clients send numbers)
  and written as names; a name this module does not know still parses (as an "open" member)
  so that a new accelerator or state from the service never breaks a poll;
- unknown fields in responses are ignored, never an error.

Parsing is deliberately lenient. The rules a job must follow (which accelerator a machine
carries, what FLEX_START or SPOT accept, ...) live in :mod:`airflow_gpu_sched.vertex.rules`, so the
client, the operators and the emulator reject the same specs with the same words, while a
response from the service always parses.

May import: vertex; never airflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from airflow_gpu_sched.vertex.defaults import MAX_WAIT_DURATION
from airflow_gpu_sched.vertex.enums import AcceleratorType, JobState, PersistentResourceState, Strategy
from airflow_gpu_sched.vertex.wire_scalars import Duration, Int64, Timestamp

# --------------------------------------------------------------------------- base model


class VertexModel(BaseModel):
    """camelCase on the wire, snake_case attributes, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_enum_values=False,
        validate_assignment=False,
        defer_build=True,  # build validators on first use: importing the operators stays cheap at DAG parse
    )

    def to_api(self) -> dict[str, Any]:
        """The JSON body the API speaks: camelCase, int64 as strings, no unset fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_api(cls, data: Any) -> Any:
        return cls.model_validate(data)


# --------------------------------------------------------------------------- job spec

# What is submitted keeps the fields we do not model (network, encryptionSpec, tensorboard,
# enableWebAccess, reservationAffinity, ...): a job_spec= body is checked against Google's
# schema (vertex.strict_json), not ours, and must reach Vertex whole.
_REQUEST = ConfigDict(**{**VertexModel.model_config, "extra": "allow"})


class EnvVar(VertexModel):
    name: str
    value: str | None = None


class ContainerSpec(VertexModel):
    model_config = _REQUEST
    image_uri: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None


class PythonPackageSpec(VertexModel):
    executor_image_uri: str | None = None
    package_uris: list[str] | None = None
    python_module: str | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None


class MachineSpec(VertexModel):
    model_config = _REQUEST
    machine_type: str | None = None
    accelerator_type: AcceleratorType | None = None
    accelerator_count: int | None = None
    reservation_affinity: dict[str, Any] | None = None
    tpu_topology: str | None = None
    gpu_partition_size: str | None = None


class DiskSpec(VertexModel):
    model_config = _REQUEST
    boot_disk_type: str | None = None
    boot_disk_size_gb: int | None = None

    # The default type depends on the machine type: catalog.default_boot_disk_type.
    DEFAULT_SIZE_GB: ClassVar[int] = 100


class NfsMount(VertexModel):
    server: str | None = None
    path: str | None = None
    mount_point: str | None = None


class WorkerPoolSpec(VertexModel):
    model_config = _REQUEST
    container_spec: ContainerSpec | None = None
    python_package_spec: PythonPackageSpec | None = None
    machine_spec: MachineSpec | None = None
    replica_count: Int64 | None = None
    disk_spec: DiskSpec | None = None
    nfs_mounts: list[NfsMount] | None = None

    def is_empty(self) -> bool:
        """Pools after the first may be ``{}`` (no replicas of that role)."""
        return not self.model_dump(exclude_none=True)

    @property
    def replicas(self) -> int:
        return 1 if self.replica_count is None else self.replica_count

    @property
    def env(self) -> dict[str, str]:
        task = self.container_spec or self.python_package_spec
        return {e.name: e.value or "" for e in (task.env or [])} if task else {}


class Scheduling(VertexModel):
    model_config = _REQUEST
    timeout: Duration | None = None
    restart_job_on_worker_restart: bool | None = None
    strategy: Strategy | None = None
    disable_retries: bool | None = None
    max_wait_duration: Duration | None = None

    DEFAULT_TIMEOUT: ClassVar[timedelta] = timedelta(days=7)
    DEFAULT_MAX_WAIT: ClassVar[timedelta] = MAX_WAIT_DURATION

    @property
    def effective_strategy(self) -> Strategy:
        return (self.strategy or Strategy.STRATEGY_UNSPECIFIED).effective


class GcsDestination(VertexModel):
    output_uri_prefix: str | None = None


class CustomJobSpec(VertexModel):
    model_config = _REQUEST
    worker_pool_specs: list[WorkerPoolSpec] = Field(default_factory=list)
    scheduling: Scheduling | None = None
    persistent_resource_id: str | None = None
    service_account: str | None = None
    network: str | None = None
    reserved_ip_ranges: list[str] | None = None
    base_output_directory: GcsDestination | None = None
    protected_artifact_location_id: str | None = None
    tensorboard: str | None = None
    enable_web_access: bool | None = None
    enable_dashboard_access: bool | None = None
    experiment: str | None = None
    experiment_run: str | None = None
    models: list[str] | None = None

    @property
    def strategy(self) -> Strategy:
        return (self.scheduling or Scheduling()).effective_strategy

    def active_pools(self) -> list[tuple[int, WorkerPoolSpec]]:
        """(index, pool) for every pool that asks for replicas."""
        return [(i, p) for i, p in enumerate(self.worker_pool_specs) if not p.is_empty()]

    def accelerators_held(self) -> int:
        """Accelerators the spec holds at once: per replica x replicas, summed over its pools."""
        return sum(((pool.machine_spec.accelerator_count or 0) if pool.machine_spec else 0) * pool.replicas
                   for _, pool in self.active_pools())

    def accelerator_demand(self) -> dict[AcceleratorType, int]:
        """Accelerators the job holds at once, per type (count x replicas over all pools)."""
        demand: dict[AcceleratorType, int] = {}
        for _, pool in self.active_pools():
            spec = pool.machine_spec
            if spec and spec.accelerator_type and spec.accelerator_count:
                demand[spec.accelerator_type] = (
                    demand.get(spec.accelerator_type, 0) + spec.accelerator_count * pool.replicas
                )
        return demand


# --------------------------------------------------------------------------- resources


class Status(VertexModel):
    """google.rpc.Status: ``code`` is the numeric rpc code (1 = CANCELLED, ...)."""

    code: int | None = None
    message: str | None = None
    details: list[dict[str, Any]] | None = None


class CustomJob(VertexModel):
    model_config = _REQUEST
    name: str | None = None
    display_name: str | None = None
    job_spec: CustomJobSpec = Field(default_factory=CustomJobSpec)
    state: JobState | None = None
    create_time: Timestamp | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    update_time: Timestamp | None = None
    error: Status | None = None
    labels: dict[str, str] | None = None
    encryption_spec: dict[str, Any] | None = None
    web_access_uris: dict[str, str] | None = None
    satisfies_pzs: bool | None = None
    satisfies_pzi: bool | None = None

    @property
    def job_id(self) -> str | None:
        return self.name.rsplit("/", 1)[-1] if self.name else None

    def is_terminal(self) -> bool:
        return self.state is not None and self.state.is_terminal()


class AutoscalingSpec(VertexModel):
    min_replica_count: Int64 | None = None
    max_replica_count: Int64 | None = None


class ResourcePool(VertexModel):
    id: str | None = None
    machine_spec: MachineSpec | None = None
    replica_count: Int64 | None = None
    disk_spec: DiskSpec | None = None
    # proto3 JSON leaves a 0 out: an idle pool has no usedReplicaCount (recorded), so absent is 0
    used_replica_count: Int64 = 0
    autoscaling_spec: AutoscalingSpec | None = None

    @property
    def capacity(self) -> int:
        """Replicas the pool can hold: the autoscaling max when set, else ``replicaCount``."""
        if self.autoscaling_spec and self.autoscaling_spec.max_replica_count:
            return self.autoscaling_spec.max_replica_count
        return self.replica_count or 0

    @property
    def free_replicas(self) -> int:
        return max(0, self.capacity - self.used_replica_count)


class PersistentResource(VertexModel):
    name: str | None = None
    display_name: str | None = None
    resource_pools: list[ResourcePool] = Field(default_factory=list)
    state: PersistentResourceState | None = None
    error: Status | None = None
    create_time: Timestamp | None = None
    start_time: Timestamp | None = None
    update_time: Timestamp | None = None
    labels: dict[str, str] | None = None
    network: str | None = None
    reserved_ip_ranges: list[str] | None = None
    resource_runtime_spec: dict[str, Any] | None = None
    encryption_spec: dict[str, Any] | None = None


class Operation(VertexModel):
    """google.longrunning.Operation; ``metadata``/``response`` hold ``@type``-tagged objects."""

    name: str | None = None
    metadata: dict[str, Any] | None = None
    done: bool = False  # proto3 JSON leaves false out: an operation not done has no "done" (recorded)
    error: Status | None = None
    response: dict[str, Any] | None = None


class ListCustomJobsResponse(VertexModel):
    custom_jobs: list[CustomJob] = Field(default_factory=list)
    next_page_token: str | None = None


class ListPersistentResourcesResponse(VertexModel):
    persistent_resources: list[PersistentResource] = Field(default_factory=list)
    next_page_token: str | None = None


# --------------------------------------------------------------------------- other job types (models in job_type_models)

CUSTOM_TASK_DEFINITION = "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
AIPLATFORM_SERVICE = "aiplatform.googleapis.com"


# rpc status name -> (numeric rpc code, HTTP status), as Google maps them (vertex-api.md).
RPC_STATUS: dict[str, tuple[int, int]] = {
    "CANCELLED": (1, 499), "UNKNOWN": (2, 500), "INVALID_ARGUMENT": (3, 400),
    "DEADLINE_EXCEEDED": (4, 504), "NOT_FOUND": (5, 404), "ALREADY_EXISTS": (6, 409),
    "PERMISSION_DENIED": (7, 403), "RESOURCE_EXHAUSTED": (8, 429), "FAILED_PRECONDITION": (9, 400),
    "ABORTED": (10, 409), "OUT_OF_RANGE": (11, 400), "UNIMPLEMENTED": (12, 501), "INTERNAL": (13, 500),
    "UNAVAILABLE": (14, 503), "DATA_LOSS": (15, 500), "UNAUTHENTICATED": (16, 401),
}
