"""Which accelerators each machine type carries, and which ones each strategy accepts.

Data only; the rules that use it are in :mod:`airflow_gpu_sched.vertex.rules`. Source: the table
in ``shared/vertex-api.md`` (A2, A3, A4, G2) plus N1 (the attachable older GPUs) and TPUs (sources by each table).

May import: vertex; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_gpu_sched.vertex.enums import AcceleratorType as A
from airflow_gpu_sched.vertex.enums import Strategy


@dataclass(frozen=True)
class MachineGpus:
    """An accelerator a machine type carries and the counts it may be requested in."""

    accelerator: A
    counts: tuple[int, ...]


def _fixed(accelerator: A, **per_type: int) -> dict[str, MachineGpus]:
    return {name.replace("_", "-"): MachineGpus(accelerator, (n,)) for name, n in per_type.items()}


# Machine types whose GPUs are built in: the accelerator and its count are fixed.
BUILT_IN_GPUS: dict[str, MachineGpus] = {
    **_fixed(A.NVIDIA_TESLA_A100, a2_highgpu_1g=1, a2_highgpu_2g=2, a2_highgpu_4g=4,
             a2_highgpu_8g=8, a2_megagpu_16g=16),
    **_fixed(A.NVIDIA_A100_80GB, a2_ultragpu_1g=1, a2_ultragpu_2g=2, a2_ultragpu_4g=4,
             a2_ultragpu_8g=8),
    **_fixed(A.NVIDIA_H100_80GB, a3_highgpu_1g=1, a3_highgpu_2g=2, a3_highgpu_4g=4,
             a3_highgpu_8g=8),
    **_fixed(A.NVIDIA_H100_MEGA_80GB, a3_megagpu_8g=8),
    **_fixed(A.NVIDIA_H200_141GB, a3_ultragpu_8g=8),
    **_fixed(A.NVIDIA_B200, a4_highgpu_8g=8),
    **_fixed(A.NVIDIA_GB200, a4x_highgpu_4g=4),
    **_fixed(A.NVIDIA_L4, g2_standard_4=1, g2_standard_8=1, g2_standard_12=1, g2_standard_16=1,
             g2_standard_32=1, g2_standard_24=2, g2_standard_48=4, g2_standard_96=8),
    **_fixed(A.NVIDIA_RTX_PRO_6000, g4_standard_48=1, g4_standard_96=2, g4_standard_192=4,
             g4_standard_384=8),
}

# N1 machines take one of these attachable GPUs, in these counts.
N1_ATTACHABLE: dict[A, tuple[int, ...]] = {
    A.NVIDIA_TESLA_T4: (1, 2, 4),
    A.NVIDIA_TESLA_V100: (1, 2, 4, 8),
    A.NVIDIA_TESLA_P100: (1, 2, 4),
    A.NVIDIA_TESLA_P4: (1, 2, 4),
}

# TPUs run on their own machine types. ``cloud-tpu`` takes TPU_V2 or TPU_V3, counted in TPU cores:
# 8 (one device, v2-8/v3-8) or a Pod slice. Sources: google-cloud-aiplatform's own unit tests
# submit ``cloud-tpu`` with TPU_V3 x 32 (tests/unit/aiplatform/constants.py,
# _TEST_TPU_V3_WORKER_POOL_SPEC); Cloud TPU's docs (tpu/docs/v2, v3) name the slice sizes in
# cores: v2 up to 512, v3 up to 2048. There is no ``cloud-tpu-v3`` machine type.
TPU_CORE_COUNTS: dict[A, tuple[int, ...]] = {
    A.TPU_V2: (8, 32, 128, 256, 512),
    A.TPU_V3: (8, 32, 64, 128, 256, 512, 1024, 2048),
}
TPU_MACHINES: dict[str, dict[A, tuple[int, ...]]] = {
    "cloud-tpu": dict(TPU_CORE_COUNTS),
    "ct4p-hightpu-4t": {A.TPU_V4_POD: (4,)},
    "ct5lp-hightpu-1t": {A.TPU_V5_LITEPOD: (1,)},
    "ct5lp-hightpu-4t": {A.TPU_V5_LITEPOD: (4,)},
    "ct5lp-hightpu-8t": {A.TPU_V5_LITEPOD: (8,)},
}

# FLEX_START (Dynamic Workload Scheduler): L4, A100 (40/80 GB), H100 (80 GB/Mega), H200, B200.
FLEX_START_ACCELERATORS: frozenset[A] = frozenset({
    A.NVIDIA_L4, A.NVIDIA_TESLA_A100, A.NVIDIA_A100_80GB, A.NVIDIA_H100_80GB,
    A.NVIDIA_H100_MEGA_80GB, A.NVIDIA_H200_141GB, A.NVIDIA_B200,
})

# SPOT training runs on the A2 and A3 machine series only: seed 001 (shared/seeds/001_*.txt,
# Google's "Use Spot VMs with training" page, "Limitações e requisitos"). The one place every
# rule reads; if Google widens it, add the series here.
SPOT_MACHINE_SERIES: tuple[str, ...] = ("a2", "a3")

# DiskSpec.bootDiskType (machine_resources.proto, and the discovery document): "For non-A3U
# machines, the default value is "pd-ssd", for A3U machines, the default value is
# "hyperdisk-balanced"". A3U = A3 Ultra = a3-ultragpu-*; A4 is not named, so it keeps pd-ssd.
BOOT_DISK_TYPES: frozenset[str] = frozenset({"pd-ssd", "pd-standard", "hyperdisk-balanced"})
HYPERDISK_DEFAULT_PREFIXES: tuple[str, ...] = ("a3-ultragpu-",)


def default_boot_disk_type(machine_type: str | None) -> str:
    """The boot disk a machine type gets when its pool sets no ``diskSpec.bootDiskType``."""
    if machine_type and machine_type.lower().startswith(HYPERDISK_DEFAULT_PREFIXES):
        return "hyperdisk-balanced"
    return "pd-ssd"


def effective_boot_disk_type(machine_type: str | None, boot_disk_type: str | None) -> str:
    return boot_disk_type or default_boot_disk_type(machine_type)


def spot_series_text() -> str:
    """"the A2 and A3 machine series", from :data:`SPOT_MACHINE_SERIES` (for messages)."""
    names = [s.upper() for s in SPOT_MACHINE_SERIES]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"the {listed} machine series"


def machine_series(machine_type: str) -> str:
    return machine_type.split("-", 1)[0].lower()


def accelerators_for(machine_type: str) -> dict[A, tuple[int, ...]]:
    """Accelerators (with allowed counts) a machine type takes; empty for CPU-only types."""
    fixed = BUILT_IN_GPUS.get(machine_type)
    if fixed:
        return {fixed.accelerator: fixed.counts}
    if machine_type in TPU_MACHINES:
        return dict(TPU_MACHINES[machine_type])
    if machine_series(machine_type) == "n1":
        return dict(N1_ATTACHABLE)
    return {}


# --------------------------------------------------------------------------- quota metrics

# The <gpu> part of Vertex AI's training GPU quota metrics
# (aiplatform.googleapis.com/custom_model_training_[preemptible_]nvidia_<gpu>_gpus). Google's
# DWS page names ``custom_model_training_[preemptible_]nvidia_h100_gpus`` for NVIDIA_H100_80GB;
# the others follow the names the Cloud console lists. TPUs have no such metric here.
QUOTA_GPU_NAMES: dict[A, str] = {
    A.NVIDIA_TESLA_K80: "k80",
    A.NVIDIA_TESLA_P100: "p100",
    A.NVIDIA_TESLA_V100: "v100",
    A.NVIDIA_TESLA_P4: "p4",
    A.NVIDIA_TESLA_T4: "t4",
    A.NVIDIA_TESLA_A100: "a100",
    A.NVIDIA_A100_80GB: "a100_80gb",
    A.NVIDIA_L4: "l4",
    A.NVIDIA_H100_80GB: "h100",
    A.NVIDIA_H100_MEGA_80GB: "h100_mega",
    A.NVIDIA_H200_141GB: "h200",
    A.NVIDIA_B200: "b200",
    A.NVIDIA_GB200: "gb200",
    A.NVIDIA_RTX_PRO_6000: "rtx_pro_6000",
}

QUOTA_SERVICE = "aiplatform.googleapis.com"


def uses_preemptible_quota(strategy: Strategy | str | None) -> bool:
    """SPOT and FLEX_START draw on the *preemptible* GPU quota; STANDARD on the on-demand one."""
    effective = Strategy(strategy or Strategy.STRATEGY_UNSPECIFIED).effective
    return effective in (Strategy.SPOT, Strategy.FLEX_START)


def quota_metric(accelerator: A | str, strategy: Strategy | str | None = None, *,
                 full: bool = True) -> str | None:
    """The GPU quota metric a job of ``strategy`` with ``accelerator`` draws on:
    ``aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus`` for
    FLEX_START/SPOT on H100, ``..._nvidia_h100_gpus`` for STANDARD (``full=False``: without the
    service prefix). None for an accelerator with no known metric (TPUs, unknown types)."""
    gpu = QUOTA_GPU_NAMES.get(A(accelerator))
    if gpu is None:
        return None
    short = f"custom_model_training_{'preemptible_' if uses_preemptible_quota(strategy) else ''}nvidia_{gpu}_gpus"
    return f"{QUOTA_SERVICE}/{short}" if full else short


def accelerator_of_metric(metric: str) -> tuple[A, bool] | None:
    """The inverse of :func:`quota_metric`: (accelerator, preemptible?) or None."""
    short = metric.rsplit("/", 1)[-1]
    for accelerator, gpu in QUOTA_GPU_NAMES.items():
        if short == f"custom_model_training_nvidia_{gpu}_gpus":
            return accelerator, False
        if short == f"custom_model_training_preemptible_nvidia_{gpu}_gpus":
            return accelerator, True
    return None


def gpu_quota_metric(accelerator: A | str, preemptible: bool) -> str:
    """Like :func:`quota_metric` with the tier as a flag; always a name (an accelerator missing
    from :data:`QUOTA_GPU_NAMES` gets its enum name, lowercased, without ``nvidia_``/``tesla_``)."""
    accelerator = A(accelerator)
    gpu = QUOTA_GPU_NAMES.get(accelerator) or accelerator.value.lower().removeprefix("nvidia_").removeprefix("tesla_")
    return f"{QUOTA_SERVICE}/custom_model_training_{'preemptible_' if preemptible else ''}nvidia_{gpu}_gpus"
