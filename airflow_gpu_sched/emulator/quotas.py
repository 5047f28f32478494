"""The emulator's one quota store: GPU quota limits per (metric, region), served both as the
Cloud Quotas API (``quotaInfos``) and enforced as Vertex AI enforces them (:func:`verdict`).

How a limit is enforced (per project and region, one metric at a time):
- a job that *alone* needs more than the limit is refused at create: 429 RESOURCE_EXHAUSTED
  "The following quota metrics exceed quota limits: aiplatform.googleapis.com/<metric>"
  (observed: GoogleCloudPlatform/stable-diffusion-on-gcp#12, google-deepmind/xmanager#29);
- a job that fits the limit, but not next to what the project's other jobs hold, is accepted
  and stays QUEUED until enough is free (documented: "if your Google Cloud project does not
  have sufficient remaining custom training quotas for your job, then Vertex AI keeps the job
  queued until you have sufficient quotas", cloud.google.com/vertex-ai/docs/training/
  understanding-training-service, "Queue a new job").
- *assumed*: a job holds quota exactly while it holds capacity, from admission (QUEUED ->
  PENDING) until it ends, is cancelled or is preempted (like its GPUs); waiting jobs are
  admitted oldest first, and one that does not fit is skipped (backfill), as for capacity.

Limits come from the scenario (``quotas``, and the older per-accelerator ``quota``) and the
control API (``POST /emulator/v1/quotas`` and the older ``POST /emulator/v1/quota``), which all
write here. A limit set for region None is the default for every region without its own.
A metric never set *reports* ``defaultGpuQuota`` (64) in every region but is not enforced, so
load tests that queue many jobs are unaffected.

May import: vertex; never airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.vertex import catalog
from airflow_gpu_sched.vertex.enums import AcceleratorType
from airflow_gpu_sched.vertex.models import AIPLATFORM_SERVICE

REGIONS = ("us-central1", "us-east1", "us-east4", "us-east5", "us-west1", "us-west4", "europe-west4",
           "asia-southeast1")


def full_metric(metric: str) -> str:
    """``custom_model_training_nvidia_l4_gpus`` -> ``aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus``."""
    metric = metric.strip()
    return metric if "/" in metric else f"{AIPLATFORM_SERVICE}/{metric}"


def _quota_id(metric: str) -> str:
    """``custom_model_training_nvidia_h100_gpus`` -> ``CustomModelTrainingNvidiaH100GpusPerProjectPerRegion``."""
    return "".join(w.capitalize() for w in metric.rsplit("/", 1)[-1].split("_")) + "PerProjectPerRegion"


def _display(metric: str) -> str:
    found = catalog.accelerator_of_metric(metric)
    if found is None:
        return metric.rsplit("/", 1)[-1]
    accelerator, preemptible = found
    return f"Custom model training {'preemptible ' if preemptible else ''}{accelerator.value} GPUs per region"


UNLIMITED = -1  # what Cloud Quotas reports for a quota with no limit
FITS, WAIT, REFUSE = "fits", "wait", "refuse"


def verdict(limit: int | None, held: int, wanted: int) -> str:
    """One metric's rule: FITS (admit now), WAIT (accepted, stays QUEUED) or REFUSE (429 at
    create). ``limit`` None (never set) or negative (unlimited) is not enforced."""
    if limit is None or limit < 0 or held + wanted <= limit:
        return FITS
    return REFUSE if wanted > limit else WAIT


def metric_demand(demand: dict[str, int], preemptible: bool) -> dict[str, int]:
    """GPUs per accelerator -> GPUs per quota metric (accelerators with no metric, e.g. TPUs, drop out)."""
    out: dict[str, int] = {}
    for accelerator, gpus in demand.items():
        metric = catalog.quota_metric(accelerator, "SPOT" if preemptible else "STANDARD")
        if metric and gpus:
            out[metric] = out.get(metric, 0) + gpus
    return out


class QuotaStore:
    def __init__(self, default_limit: int = 64):
        self.default_limit = default_limit
        self.limits: dict[tuple[str, str | None], int] = {}  # (full metric, region or None) -> limit
        self.held: dict[tuple[str, str, str], int] = {}  # (project, region, full metric) -> GPUs held now
        self.deny = False  # the quota API answers 403 PERMISSION_DENIED

    # --- enforcement (the backend calls these at create, admission and release)

    def refused(self, region: str, wanted: dict[str, int]) -> str | None:
        """The first metric whose limit ``wanted`` alone exceeds (the create is refused), or None."""
        return next((m for m, n in wanted.items() if verdict(self.enforced_limit(m, region), 0, n) == REFUSE), None)

    def fits(self, project: str, region: str, wanted: dict[str, int]) -> bool:
        """True when every metric has room for ``wanted`` next to what the project holds now."""
        return all(verdict(self.enforced_limit(m, region), self.held.get((project, region, m), 0), n) == FITS
                   for m, n in wanted.items())

    def take(self, project: str, region: str, wanted: dict[str, int]) -> None:
        for metric, n in wanted.items():
            key = (project, region, metric)
            self.held[key] = self.held.get(key, 0) + n

    def give_back(self, project: str, region: str, wanted: dict[str, int]) -> None:
        for metric, n in wanted.items():
            key = (project, region, metric)
            self.held[key] = max(0, self.held.get(key, 0) - n)

    def set(self, metric: str, region: str | None, limit: int) -> None:
        if not metric:
            raise ValueError("metric is required (e.g. custom_model_training_preemptible_nvidia_h100_gpus)")
        if limit < -1:
            raise ValueError(f"limit must be -1 (unlimited) or more (got {limit})")
        self.limits[(full_metric(metric), region or None)] = limit

    def set_for_accelerator(self, region: str, accelerator: str, preemptible: bool, limit: int) -> None:
        """The older per-accelerator form (``POST /emulator/v1/quota``)."""
        strategy = "SPOT" if preemptible else "STANDARD"
        metric = catalog.quota_metric(AcceleratorType(accelerator), strategy)
        if metric is None:
            raise ValueError(f"no GPU quota metric is known for accelerator {accelerator!r}")
        self.set(metric, region, limit)

    def enforced_limit(self, metric: str, region: str) -> int | None:
        """The limit set for ``region`` (or for all regions); None when never set (not enforced)."""
        metric = full_metric(metric)
        if (metric, region) in self.limits:
            return self.limits[(metric, region)]
        return self.limits.get((metric, None))

    def view(self) -> list[dict]:
        return [{"metric": m, "region": r, "limit": v} for (m, r), v in sorted(self.limits.items(),
                                                                               key=lambda kv: (kv[0][0], kv[0][1] or ""))]

    def legacy_view(self) -> list[dict]:
        """The store as the older ``/quota`` endpoint answers: per location and accelerator."""
        rows = []
        for (metric, region), limit in self.limits.items():
            found = catalog.accelerator_of_metric(metric)
            if found is None or region is None:
                continue
            accelerator, preemptible = found
            rows.append({"location": region, "acceleratorType": accelerator.value,
                         "preemptible" if preemptible else "standard": limit})
        return rows

    def metrics(self) -> list[str]:
        known = [catalog.quota_metric(a, s) for a in catalog.QUOTA_GPU_NAMES for s in ("STANDARD", "SPOT")]
        extra = sorted({m for m, _ in self.limits} - set(known))
        return [m for m in known if m] + extra

    def quota_info(self, project: str, metric: str) -> dict[str, Any]:
        """One Cloud Quotas ``QuotaInfo`` (JSON): regional limits first (most specific), then the
        default for all other regions (no ``dimensions``)."""
        regional = sorted((r, v) for (m, r), v in self.limits.items() if m == metric and r is not None)
        default = self.limits.get((metric, None), self.default_limit)
        # proto3 JSON, as Google prints it: no default of a field without presence (an empty map,
        # a 0 limit, false), so the default info has no "dimensions" and a 0 limit is "details": {}
        details = lambda v: {"value": str(v)} if v else {}  # noqa: E731
        infos = [{"dimensions": {"region": r}, "details": details(v), "applicableLocations": [r]}
                 for r, v in regional]
        others = [r for r in REGIONS if r not in dict(regional)]
        infos.append({"details": details(default), "applicableLocations": others})
        quota_id = _quota_id(metric)
        return {
            "name": f"projects/{project}/locations/global/services/{AIPLATFORM_SERVICE}/quotaInfos/{quota_id}",
            "quotaId": quota_id,
            "metric": metric,
            "service": AIPLATFORM_SERVICE,
            "isPrecise": True,
            "containerType": "PROJECT",
            "dimensions": ["region"],
            "metricDisplayName": _display(metric),
            "quotaDisplayName": _display(metric),
            "metricUnit": "1/{project}/{region}",
            "quotaIncreaseEligibility": {"isEligible": True},
            "dimensionsInfos": infos,  # isFixed, isConcurrent: false, so not printed
        }
