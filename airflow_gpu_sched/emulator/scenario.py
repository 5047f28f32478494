"""What an emulator session simulates: timings, capacity, preemption rate, faults, pools.

A scenario is a JSON or YAML file (``airflow-gpu-sched emulator --scenario FILE``) holding the
same settings as the control API. Every duration is in emulated seconds.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Bounds on what a scenario (the control API's bodies) may say (docs/security.md): every number
# finite; durations 0..10 years of emulated time; speed (0, 1e6] as emulator/clock.py; an injected
# fault's latency is real time, so at most 10 s (no request hangs on it); fault status codes 4xx/5xx.
MAX_SCENARIO_SECONDS = 10 * 365 * 86400.0
MAX_SCENARIO_SPEED = 1e6
MAX_FAULT_LATENCY_SECONDS = 10.0
Seconds = Annotated[float, Field(ge=0, le=MAX_SCENARIO_SECONDS)]
Rate = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=-1, le=10**9)]  # GPUs, quota limits (-1: unlimited where allowed)


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              allow_inf_nan=False)


class TierCapacity(_Camel):
    """GPUs per accelerator type and location, separately for each capacity strategy."""

    standard: Count | None = None
    spot: Count | None = None
    flex_start: Count | None = None


class CapacitySetting(TierCapacity):
    location: str
    accelerator_type: str
    at_seconds: Seconds | None = Field(None, description="apply at this emulated second (None: now)")
    # How long a STANDARD job of this accelerator here waits QUEUED for capacity before the service
    # gives up: FAILED, "Resources are insufficient in region: <location>" (observed:
    # openreview/openreview-expertise#401; the wait, code 8 and no ErrorInfo are assumed).
    # Left out: unchanged; null: queue for ever (the default).
    standard_stockout_seconds: Seconds | None = None


class QuotaSetting(_Camel):
    """GPU quota per region and accelerator: on-demand (STANDARD) and preemptible (SPOT and
    FLEX_START, which Vertex charges to the preemptible quota)."""

    location: str
    accelerator_type: str
    standard: Count | None = None
    preemptible: Count | None = None


class QuotaLimit(_Camel):
    """A Cloud Quotas limit: ``metric`` (``custom_model_training_preemptible_nvidia_h100_gpus``,
    with or without ``aiplatform.googleapis.com/``), ``region`` (None: every region without its
    own limit) and ``limit`` (GPUs; -1 unlimited)."""

    metric: str
    region: str | None = None
    limit: Count


class QuotasSetting(_Camel):
    """``POST /emulator/v1/quotas``: set a limit, and/or make the quota API deny reads (403)."""

    metric: str | None = None
    region: str | None = None
    limit: Count | None = None
    deny: bool | None = None


class JobFailure(_Camel):
    """A failure injected into one custom job (fault injection: the emulator's, not an API of
    Vertex): the job runs ``after_seconds`` (None: its own run time), then ends FAILED as a
    non-zero exit does, error code 3 (observed: vertex-ai-samples#1504, "code: 3"), with
    ``message`` as its ``error.message`` (None: Vertex's own wording, "The replica workerpool0-0
    exited with a non-zero status of <exit_code>. ...") and ``log_lines`` as the failing replica's
    last ERROR lines (None: the emulator's traceback). What real hardware failures say:
    docs/resubmit.md."""

    exit_code: int = Field(1, ge=1, le=255)
    message: str | None = Field(None, max_length=4096)
    log_lines: list[Annotated[str, Field(max_length=4096)]] | None = Field(None, max_length=100)
    after_seconds: Seconds | None = None


class Faults(_Camel):
    error_rate: Rate = 0.0
    status_codes: list[Annotated[int, Field(ge=400, le=599)]] = Field(default_factory=lambda: [429, 503],
                                                                     min_length=1, max_length=100)
    latency_seconds: float = Field(0.0, ge=0, le=MAX_FAULT_LATENCY_SECONDS)
    # Share of faulted 5xx responses that come *after* the request was carried out: the job
    # exists, but the client sees an error (a lost response), which makes a create ambiguous.
    # A 429 always means refused, never done.
    after_handler_rate: Rate = 0.0


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
    # JOB_STATE_EXPIRED ("expired"), or CANCELLED, error code 1 "CANCELED" ("cancelled": the
    # legacy AI Platform's maxWaitTime: "... AI Platform Training cancels it").
    flex_start_expiry: Literal["failed", "expired", "cancelled"] = "failed"
    # A job running past scheduling.timeout (counted from its first RUNNING): FAILED with
    # DEADLINE_EXCEEDED ("failed"), or CANCELLED ("cancelled": the legacy maxRunningTime:
    # "AI Platform Training cancels it"; tensorflow/tfx#6223: cancelled after exactly 7 days).
    timeout_outcome: Literal["failed", "cancelled"] = "failed"
    # The state a FLEX_START job shows while it waits for capacity.
    flex_start_waiting_state: Literal["JOB_STATE_QUEUED", "JOB_STATE_PENDING"] = "JOB_STATE_QUEUED"
    # A job whose (specific) reservation has too few free VMs: waits QUEUED until VMs free up
    # ("queued"), or FAILED with RESOURCE_EXHAUSTED at admission ("failed").
    reservation_full: Literal["queued", "failed"] = "queued"
    # Lists (AIP-158: "may return fewer results than the number requested (including zero
    # results), even if not at the end of the collection"): pages as full as the page size allows
    # ("full"), or short and empty ones that still carry a nextPageToken ("short": emulator/paging.py).
    list_pages: Literal["full", "short"] = "full"
    # How a cancelled job ends (job_state.proto: from CANCELLING "the job may only go to either
    # JOB_STATE_SUCCEEDED, JOB_STATE_FAILED or JOB_STATE_CANCELLED"; CancelCustomJob: "success is
    # not guaranteed"): CANCELLED with code 1 ("cancelled"), or it completed anyway ("succeeded"),
    # or it failed while stopping ("failed": exit 143, SIGTERM). Tuning jobs and pipelines the same.
    cancel_outcome: Literal["cancelled", "succeeded", "failed"] = "cancelled"
    # A cancel of a job that has already ended: 400 FAILED_PRECONDITION ("refused"), or {} and
    # nothing done ("noop": gcloud's "If the job is already finished, the command will not perform
    # an operation and exit successfully", gcloud ai-platform jobs cancel).
    cancel_ended: Literal["refused", "noop"] = "refused"
    # When startTime is set: ~0.14 s after createTime, at admission, while the job still waits
    # ("admission": recorded real traffic, cloud-custodian's vertexai_custom_job_* and
    # vertexai_hp_tuning_job_* flights), or at the first RUNNING as the proto's comment says
    # ("first_running": the emulator's old behaviour).
    start_time: Literal["admission", "first_running"] = "admission"
    # How the billing catalog (services.skus.list, SAMPLE data) words the GPU training tiers:
    # OnDemand, Spot as usageType Preemptible, and DWS flex-start SKUs ("dws"); no DWS SKUs at all
    # ("no_dws"); Spot told apart only by "Spot" in the description ("spot_in_description").
    billing_skus: Literal["dws", "no_dws", "spot_in_description"] = "dws"
    # When a training pipeline shows PIPELINE_STATE_RUNNING: as soon as its backing custom job
    # exists, the job still waiting for its VMs ("job_created": observed, Feb 2026 public training
    # logs: RUNNING at +5-35 s, the job "preparing" until +215-222 s), or when that job runs
    # ("job_running": the emulator's old behaviour).
    pipeline_running: Literal["job_created", "job_running"] = "job_created"
    # When a tuning job shows JOB_STATE_RUNNING: when its first trial's custom job runs
    # ("trial_running"), or as soon as its first trial is created ("trial_created"). Not known.
    tuning_running: Literal["trial_running", "trial_created"] = "trial_running"


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
    seed: int = Field(0, ge=-(2**63), le=2**63)
    speed: float = Field(1.0, gt=0, le=MAX_SCENARIO_SPEED)
    queue_seconds: Seconds = 1.0  # least time a job shows QUEUED before it may be admitted
    provisioning_seconds: Seconds = 30.0  # PENDING -> RUNNING on fresh VMs
    persistent_provisioning_seconds: Seconds = 2.0  # PENDING -> RUNNING on a persistent resource
    resource_provisioning_seconds: Seconds = 60.0  # persistent resource PROVISIONING -> RUNNING
    run_seconds: Seconds = 60.0  # default run time (EMULATOR_RUN_SECONDS overrides per job)
    cancel_seconds: Seconds = 2.0  # CANCELLING -> CANCELLED
    # random preemption rate of a running SPOT job; the service restarts a preempted one this many times
    spot_preemptions_per_hour: float = Field(0.0, ge=0, le=1e7)
    max_service_restarts: int = Field(6, ge=0, le=1000)
    default_capacity: TierCapacity = Field(
        default_factory=lambda: TierCapacity(standard=64, spot=64, flex_start=64)
    )
    capacity: list[CapacitySetting] = Field(default_factory=list)
    quota: list[QuotaSetting] = Field(default_factory=list)  # none set: unlimited (older form of `quotas`)
    quotas: list[QuotaLimit] = Field(default_factory=list)  # Cloud Quotas limits per metric and region
    default_gpu_quota: Count = 64  # what the quota API reports for a metric never set (not enforced)
    faults: Faults = Field(default_factory=Faults)
    # Injected job failures, one each for the next custom jobs created (trials' and pipelines'
    # jobs too), in creation order; a job past the list runs as its env says.
    job_failures: list[JobFailure] = Field(default_factory=list, max_length=1000)
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
