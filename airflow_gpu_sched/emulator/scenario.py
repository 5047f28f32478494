"""What an emulator session simulates: timings, capacity, preemption rate, faults, pools.

A scenario is a JSON or YAML file (``airflow-gpu-sched emulator --scenario FILE``) holding the
same settings as the control API. Every duration is in emulated seconds.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class TierCapacity(_Camel):
    """GPUs per accelerator type and location, separately for each capacity strategy."""

    standard: int | None = None
    spot: int | None = None
    flex_start: int | None = None


class CapacitySetting(TierCapacity):
    location: str
    accelerator_type: str
    at_seconds: float | None = Field(None, description="apply at this emulated second (None: now)")
    # How long a STANDARD job of this accelerator here waits QUEUED for capacity before the service
    # gives up: FAILED, "Resources are insufficient in region: <location>" (observed:
    # openreview/openreview-expertise#401; the wait, code 8 and no ErrorInfo are assumed).
    # Left out: unchanged; null: queue for ever (the default).
    standard_stockout_seconds: float | None = Field(None, ge=0)


class QuotaSetting(_Camel):
    """GPU quota per region and accelerator: on-demand (STANDARD) and preemptible (SPOT and
    FLEX_START, which Vertex charges to the preemptible quota)."""

    location: str
    accelerator_type: str
    standard: int | None = None
    preemptible: int | None = None


class QuotaLimit(_Camel):
    """A Cloud Quotas limit: ``metric`` (``custom_model_training_preemptible_nvidia_h100_gpus``,
    with or without ``aiplatform.googleapis.com/``), ``region`` (None: every region without its
    own limit) and ``limit`` (GPUs; -1 unlimited)."""

    metric: str
    region: str | None = None
    limit: int


class QuotasSetting(_Camel):
    """``POST /emulator/v1/quotas``: set a limit, and/or make the quota API deny reads (403)."""

    metric: str | None = None
    region: str | None = None
    limit: int | None = None
    deny: bool | None = None


class Faults(_Camel):
    error_rate: float = 0.0
    status_codes: list[int] = Field(default_factory=lambda: [429, 503])
    latency_seconds: float = 0.0
    # Share of faulted 5xx responses that come *after* the request was carried out: the job
    # exists, but the client sees an error (a lost response), which makes a create ambiguous.
    # A 429 always means refused, never done.
    after_handler_rate: float = 0.0


class Variants(_Camel):
    """Behaviours no public source settles, each with its plausible variants (docs/fidelity.md).
    The defaults are the emulator's historical choices; the operator's tests pass under each."""

    # What a SPOT job shows while the service restarts it after a preemption: RUNNING -> QUEUED
    # -> PENDING -> RUNNING ("visible"), or RUNNING throughout until the final FAILED ("invisible").
    spot_restarts: Literal["visible", "invisible"] = "visible"
    # A failed job's error: code, message and a google.rpc.ErrorInfo reason ("error_info"), or
    # code and message only ("message_only").
    error_details: Literal["error_info", "message_only"] = "error_info"
    # A FLEX_START job whose maxWaitDuration runs out: FAILED with DEADLINE_EXCEEDED ("failed"),
    # or JOB_STATE_EXPIRED with that error ("expired").
    flex_start_expiry: Literal["failed", "expired"] = "failed"
    # The state a FLEX_START job shows while it waits for capacity.
    flex_start_waiting_state: Literal["JOB_STATE_QUEUED", "JOB_STATE_PENDING"] = "JOB_STATE_QUEUED"
    # A job whose (specific) reservation has too few free VMs: waits QUEUED until VMs free up
    # ("queued"), or FAILED with RESOURCE_EXHAUSTED at admission ("failed").
    reservation_full: Literal["queued", "failed"] = "queued"
    # When startTime is set: ~0.14 s after createTime, at admission, while the job still waits
    # ("admission": recorded real traffic, cloud-custodian's vertexai_custom_job_* and
    # vertexai_hp_tuning_job_* flights), or at the first RUNNING as the proto's comment says
    # ("first_running": the emulator's old behaviour).
    start_time: Literal["admission", "first_running"] = "admission"


class SeededPersistentResource(_Camel):
    project: str
    location: str
    id: str
    resource: dict[str, Any]


class SeededReservation(_Camel):
    """A Compute Engine reservation made when the scenario starts: ``reservation`` is the body
    ``reservations.insert`` takes (``name``, ``specificReservation``: ``count``,
    ``instanceProperties``: ``machineType``, ``guestAccelerators``)."""

    project: str
    zone: str
    reservation: dict[str, Any]


class Scenario(_Camel):
    seed: int = 0
    speed: float = 1.0
    queue_seconds: float = 1.0  # least time a job shows QUEUED before it may be admitted
    provisioning_seconds: float = 30.0  # PENDING -> RUNNING on fresh VMs
    persistent_provisioning_seconds: float = 2.0  # PENDING -> RUNNING on a persistent resource
    resource_provisioning_seconds: float = 60.0  # persistent resource PROVISIONING -> RUNNING
    run_seconds: float = 60.0  # default run time (EMULATOR_RUN_SECONDS overrides per job)
    cancel_seconds: float = 2.0  # CANCELLING -> CANCELLED
    spot_preemptions_per_hour: float = 0.0  # random preemption rate of a running SPOT job
    max_service_restarts: int = 6  # the service restarts a preempted SPOT job this many times
    default_capacity: TierCapacity = Field(
        default_factory=lambda: TierCapacity(standard=64, spot=64, flex_start=64)
    )
    capacity: list[CapacitySetting] = Field(default_factory=list)
    quota: list[QuotaSetting] = Field(default_factory=list)  # none set: unlimited (older form of `quotas`)
    quotas: list[QuotaLimit] = Field(default_factory=list)  # Cloud Quotas limits per metric and region
    default_gpu_quota: int = 64  # what the quota API reports for a metric never set (not enforced)
    faults: Faults = Field(default_factory=Faults)
    variants: Variants = Field(default_factory=Variants)  # assumed behaviours: pick a variant
    persistent_resources: list[SeededPersistentResource] = Field(default_factory=list)
    reservations: list[SeededReservation] = Field(default_factory=list)  # Compute Engine reservations
    # --execute: run each RUNNING job's command as a local process (see emulator/executor.py)
    execute: bool = False
    execute_root: str | None = None  # where gs:// paths and logs go (default: a temporary folder)
    execute_workdir: str | None = None  # the processes' working directory (default: the current one)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        text = Path(path).read_text()
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            return cls.model_validate(yaml.safe_load(text) or {})
        return cls.model_validate(json.loads(text))
