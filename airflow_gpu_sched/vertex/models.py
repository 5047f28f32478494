"""The one typed picture of the Vertex AI v1 REST surface this project uses.

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

import math
import re
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from airflow_gpu_sched.vertex.defaults import MAX_WAIT_DURATION

# --------------------------------------------------------------------------- scalar types

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|ms|m|s)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


# google/protobuf/duration.proto: "Signed seconds of the span of time. Must be from -315,576,000,000
# to +315,576,000,000 inclusive" (10,000 years): the one bound of every Duration field, for the
# operators' arguments and the emulator's requests alike (strict_json checks the wire form with it).
MAX_DURATION_SECONDS = 315_576_000_000


def duration_out_of_range(seconds: float) -> str | None:
    """Why ``seconds`` is no google.protobuf.Duration (not finite, or past +-10,000 years), or None."""
    if not math.isfinite(seconds) or abs(seconds) > MAX_DURATION_SECONDS:
        return (f"is out of range: a duration is at most {MAX_DURATION_SECONDS:,} seconds either way "
                "(google.protobuf.Duration, 10,000 years)")
    return None


def _in_range(seconds: float, value: Any) -> timedelta:
    problem = duration_out_of_range(seconds)
    if problem:
        shown = "an integer of more than 64 bits" if isinstance(value, int) and value.bit_length() > 64 else \
            repr(str(value)[:60])
        raise ValueError(f"{shown} {problem}")
    return timedelta(seconds=seconds)


def parse_duration(value: Any) -> timedelta:
    """Read a duration from ``timedelta``, seconds, ``"1800s"``, ``"3.5s"`` or ``"1h30m"``; a
    ValueError (never an OverflowError) past :data:`MAX_DURATION_SECONDS` or not finite."""
    if isinstance(value, timedelta):
        return _in_range(value.total_seconds(), value)
    if isinstance(value, bool):
        raise ValueError("a duration cannot be a boolean")
    if isinstance(value, (int, float)):
        return _in_range(float(value) if abs(value) <= MAX_DURATION_SECONDS else math.inf, value)
    if isinstance(value, str):
        text = value.strip().lower()
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-")
        try:
            return _in_range(sign * float(body), value)
        except ValueError as exc:
            if "out of range" in str(exc):
                raise
        parts = _DURATION_PART.findall(body)
        if parts and "".join(n + u for n, u in parts) == body:
            return _in_range(sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts), value)
    raise ValueError(
        f"{value!r} is not a duration: use seconds (1800), '1800s', '30m', '2h', '1d' or a timedelta"
    )


def format_duration(value: timedelta) -> str:
    """Write a duration the way the API does: ``"1800s"``, ``"3.5s"``."""
    seconds = value.total_seconds()
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:.9f}".rstrip("0") + "s"


def _parse_int64(value: Any) -> Any:
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return value


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, microseconds when present (as Google writes them)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    text = value.astimezone(timezone.utc).isoformat()
    return text.replace("+00:00", "Z")


Duration = Annotated[
    timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration, when_used="json")
]
Int64 = Annotated[int, BeforeValidator(_parse_int64), PlainSerializer(str, when_used="json")]
Timestamp = Annotated[datetime, PlainSerializer(format_timestamp, when_used="json")]


# --------------------------------------------------------------------------- enums


class OpenEnum(str, Enum):
    """A string enum read from its name or its proto number, that tolerates unknown names.

    Subclasses set ``_numbers_`` (proto number -> name) through ``_numbering``. An unknown
    name becomes a pseudo-member whose value is the name, so parsing never fails on a value
    the service added after this code was written; :mod:`rules` rejects it where it matters.
    """

    @classmethod
    def _missing_(cls, value: object) -> OpenEnum | None:
        if isinstance(value, int) and not isinstance(value, bool):
            name = _ENUM_NUMBERS.get(cls.__name__, {}).get(value)
            return cls[name] if name else None
        if isinstance(value, str) and value:
            if value in cls.__members__:
                return cls[value]
            pseudo = str.__new__(cls, value)
            pseudo._name_ = value
            pseudo._value_ = value
            return pseudo
        return None

    @property
    def is_known(self) -> bool:
        return self.name in type(self).__members__

    def __str__(self) -> str:
        return self.value


class Strategy(OpenEnum):
    STRATEGY_UNSPECIFIED = "STRATEGY_UNSPECIFIED"
    ON_DEMAND = "ON_DEMAND"
    LOW_COST = "LOW_COST"
    STANDARD = "STANDARD"
    SPOT = "SPOT"
    FLEX_START = "FLEX_START"

    @property
    def effective(self) -> Strategy:
        """What the service runs: unspecified and the deprecated on-demand mean STANDARD."""
        if self in (Strategy.STRATEGY_UNSPECIFIED, Strategy.ON_DEMAND, Strategy.LOW_COST):
            return Strategy.STANDARD
        return self


class AcceleratorType(OpenEnum):
    ACCELERATOR_TYPE_UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"
    NVIDIA_TESLA_K80 = "NVIDIA_TESLA_K80"
    NVIDIA_TESLA_P100 = "NVIDIA_TESLA_P100"
    NVIDIA_TESLA_V100 = "NVIDIA_TESLA_V100"
    NVIDIA_TESLA_P4 = "NVIDIA_TESLA_P4"
    NVIDIA_TESLA_T4 = "NVIDIA_TESLA_T4"
    NVIDIA_TESLA_A100 = "NVIDIA_TESLA_A100"
    NVIDIA_A100_80GB = "NVIDIA_A100_80GB"
    NVIDIA_L4 = "NVIDIA_L4"
    NVIDIA_H100_80GB = "NVIDIA_H100_80GB"
    NVIDIA_H100_MEGA_80GB = "NVIDIA_H100_MEGA_80GB"
    NVIDIA_H200_141GB = "NVIDIA_H200_141GB"
    NVIDIA_B200 = "NVIDIA_B200"
    NVIDIA_GB200 = "NVIDIA_GB200"
    NVIDIA_RTX_PRO_6000 = "NVIDIA_RTX_PRO_6000"
    TPU_V2 = "TPU_V2"
    TPU_V3 = "TPU_V3"
    TPU_V4_POD = "TPU_V4_POD"
    TPU_V5_LITEPOD = "TPU_V5_LITEPOD"

    @property
    def is_tpu(self) -> bool:
        return self.value.startswith("TPU_")


class JobState(OpenEnum):
    JOB_STATE_UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    JOB_STATE_QUEUED = "JOB_STATE_QUEUED"
    JOB_STATE_PENDING = "JOB_STATE_PENDING"
    JOB_STATE_RUNNING = "JOB_STATE_RUNNING"
    JOB_STATE_SUCCEEDED = "JOB_STATE_SUCCEEDED"
    JOB_STATE_FAILED = "JOB_STATE_FAILED"
    JOB_STATE_CANCELLING = "JOB_STATE_CANCELLING"
    JOB_STATE_CANCELLED = "JOB_STATE_CANCELLED"
    JOB_STATE_PAUSED = "JOB_STATE_PAUSED"
    JOB_STATE_EXPIRED = "JOB_STATE_EXPIRED"
    JOB_STATE_UPDATING = "JOB_STATE_UPDATING"
    JOB_STATE_PARTIALLY_SUCCEEDED = "JOB_STATE_PARTIALLY_SUCCEEDED"

    def is_terminal(self) -> bool:
        """True once the job can change no more (PAUSED is not terminal, nor a success)."""
        return self in TERMINAL_JOB_STATES


TERMINAL_JOB_STATES = frozenset(
    {
        JobState.JOB_STATE_SUCCEEDED,
        JobState.JOB_STATE_FAILED,
        JobState.JOB_STATE_CANCELLED,
        JobState.JOB_STATE_EXPIRED,
        JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
    }
)


class PipelineState(OpenEnum):
    """A TrainingPipeline's state. Same life cycle as :class:`JobState` under other names:
    :meth:`as_job_state` maps ``PIPELINE_STATE_X`` to ``JOB_STATE_X`` so consumers can treat
    custom jobs, tuning jobs and pipelines alike."""

    PIPELINE_STATE_UNSPECIFIED = "PIPELINE_STATE_UNSPECIFIED"
    PIPELINE_STATE_QUEUED = "PIPELINE_STATE_QUEUED"
    PIPELINE_STATE_PENDING = "PIPELINE_STATE_PENDING"
    PIPELINE_STATE_RUNNING = "PIPELINE_STATE_RUNNING"
    PIPELINE_STATE_SUCCEEDED = "PIPELINE_STATE_SUCCEEDED"
    PIPELINE_STATE_FAILED = "PIPELINE_STATE_FAILED"
    PIPELINE_STATE_CANCELLING = "PIPELINE_STATE_CANCELLING"
    PIPELINE_STATE_CANCELLED = "PIPELINE_STATE_CANCELLED"
    PIPELINE_STATE_PAUSED = "PIPELINE_STATE_PAUSED"

    def is_terminal(self) -> bool:
        """True once the pipeline can change no more (PAUSED is not terminal, nor a success)."""
        return self in TERMINAL_PIPELINE_STATES

    def as_job_state(self) -> JobState:
        """``PIPELINE_STATE_X`` -> ``JOB_STATE_X`` (an unknown name maps to an open JobState)."""
        return pipeline_to_job_state(self)


TERMINAL_PIPELINE_STATES = frozenset(
    {
        PipelineState.PIPELINE_STATE_SUCCEEDED,
        PipelineState.PIPELINE_STATE_FAILED,
        PipelineState.PIPELINE_STATE_CANCELLED,
    }
)


def pipeline_to_job_state(state: PipelineState | str) -> JobState:
    """``PIPELINE_STATE_RUNNING`` -> ``JOB_STATE_RUNNING``; a JobState is returned unchanged."""
    if isinstance(state, JobState):
        return state
    return JobState("JOB_STATE_" + str(PipelineState(state).value).removeprefix("PIPELINE_STATE_"))


def as_job_state(state: JobState | PipelineState | str) -> JobState:
    """Any resource's state as a :class:`JobState` (custom jobs, tuning jobs, pipelines)."""
    if isinstance(state, JobState):
        return state
    if isinstance(state, PipelineState) or str(state).startswith("PIPELINE_STATE_"):
        return pipeline_to_job_state(state)
    return JobState(state)


class TrialState(OpenEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    INFEASIBLE = "INFEASIBLE"

    def is_terminal(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)


class GoalType(OpenEnum):
    GOAL_TYPE_UNSPECIFIED = "GOAL_TYPE_UNSPECIFIED"
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class SearchAlgorithm(OpenEnum):
    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class ScaleType(OpenEnum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class MeasurementSelectionType(OpenEnum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


class PersistentResourceState(OpenEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    ERROR = "ERROR"
    REBOOTING = "REBOOTING"
    UPDATING = "UPDATING"


# Proto numbers (vertex-api.md "JSON encoding"): Google's REST clients send these.
_ENUM_NUMBERS: dict[str, dict[int, str]] = {
    "Strategy": {0: "STRATEGY_UNSPECIFIED", 1: "ON_DEMAND", 2: "LOW_COST", 3: "STANDARD", 4: "SPOT", 6: "FLEX_START"},
    "AcceleratorType": {
        0: "ACCELERATOR_TYPE_UNSPECIFIED", 1: "NVIDIA_TESLA_K80", 2: "NVIDIA_TESLA_P100",
        3: "NVIDIA_TESLA_V100", 4: "NVIDIA_TESLA_P4", 5: "NVIDIA_TESLA_T4", 6: "TPU_V2", 7: "TPU_V3",
        8: "NVIDIA_TESLA_A100", 9: "NVIDIA_A100_80GB", 10: "TPU_V4_POD", 11: "NVIDIA_L4",
        12: "TPU_V5_LITEPOD", 13: "NVIDIA_H100_80GB", 14: "NVIDIA_H100_MEGA_80GB",
        15: "NVIDIA_H200_141GB", 16: "NVIDIA_B200", 17: "NVIDIA_GB200", 18: "NVIDIA_RTX_PRO_6000",
    },
    "JobState": dict(enumerate(JobState.__members__)),
    "PipelineState": dict(enumerate(PipelineState.__members__)),
    "TrialState": dict(enumerate(TrialState.__members__)),
    "GoalType": dict(enumerate(GoalType.__members__)),
    "SearchAlgorithm": {0: "ALGORITHM_UNSPECIFIED", 2: "GRID_SEARCH", 3: "RANDOM_SEARCH"},
    "ScaleType": dict(enumerate(ScaleType.__members__)),
    "MeasurementSelectionType": dict(enumerate(MeasurementSelectionType.__members__)),
    "PersistentResourceState": {
        0: "STATE_UNSPECIFIED", 1: "PROVISIONING", 3: "RUNNING", 4: "STOPPING", 5: "ERROR",
        6: "REBOOTING", 7: "UPDATING",
    },
}


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
