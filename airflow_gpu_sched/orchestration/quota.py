"""Quota preflight: does the region's GPU quota for a step's tier cover what the job holds at once?

FLEX_START and SPOT draw on the *preemptible* GPU quota
(``custom_model_training_preemptible_nvidia_<gpu>_gpus``), STANDARD on the on-demand one
(``custom_model_training_nvidia_<gpu>_gpus``); a persistent resource's VMs already exist. A job
submitted past its quota sits queued or fails far from the cause, so the operators read the
limit from the Cloud Quotas API first (``quotaInfos`` of ``aiplatform.googleapis.com``) and
stop with the metric, region, limit, need and how to ask for more. When the quota cannot be
read (no permission, API unreachable), :func:`shortfalls` returns None and the caller warns
and goes on: the preflight must never be the reason a job that would run does not.

May import: vertex; airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_gpu_sched.vertex.catalog import gpu_quota_metric
from airflow_gpu_sched.vertex.enums import AcceleratorType

PREEMPTIBLE_STRATEGIES = frozenset({"FLEX_START", "SPOT"})
UNLIMITED = -1  # Cloud Quotas reports a quota with no limit as -1
NO_QUOTA_STRATEGIES = frozenset({"PERSISTENT_RESOURCE"})  # the resource's VMs are already provisioned


@dataclass(frozen=True)
class Shortfall:
    metric: str
    region: str
    limit: int
    need: int
    project: str

    def __str__(self) -> str:
        quota_id = self.metric.rsplit("/", 1)[-1]
        return (f"quota {self.metric} in {self.region} is {self.limit}, the job needs {self.need} at once: "
                f"request an increase at https://console.cloud.google.com/iam-admin/quotas?project={self.project}"
                f" (filter: {quota_id}, region {self.region}), or with `gcloud beta quotas preferences create "
                f"--service=aiplatform.googleapis.com --quota-id=<the quota id> --preferred-value={self.need} "
                f"--dimensions=region={self.region} --project={self.project}`")


_METRIC = re.compile(r"aiplatform\.googleapis\.com/[A-Za-z0-9_]+")


def increase_hint(service_message: str, region: str, project: str) -> str:
    """What to raise, and where, when Vertex AI itself refused for quota (its message names the
    metrics: "The following quota metrics exceed quota limits: aiplatform.googleapis.com/...")."""
    metrics = _METRIC.findall(service_message)
    ids = ", ".join(m.rsplit("/", 1)[-1] for m in metrics) or "the GPU quota of the job's accelerator and tier"
    return (f"raise {ids} in {region}: request an increase at https://console.cloud.google.com/iam-admin/"
            f"quotas?project={project} (filter: {ids}, region {region})")


def at_once(limit: int, per_copy: int, parallel: int) -> int:
    """How many copies of a spec (a tuning job's parallel trials) run at once under ``limit``.
    The preflight refuses only when not even one fits: Vertex answers 429 at create only to a
    job whose one trial alone exceeds a limit (observed: stable-diffusion-on-gcp#12), and keeps
    trials beyond the free quota QUEUED until quota frees ("Understand the training service":
    "keeps the job queued until you have sufficient quotas"), so refusing them would stop a job
    that runs, only slower."""
    if limit <= UNLIMITED or per_copy <= 0:
        return parallel
    return min(parallel, limit // per_copy)


def metric_for(accelerator: AcceleratorType, strategy: str) -> str:
    return gpu_quota_metric(accelerator, preemptible=strategy in PREEMPTIBLE_STRATEGIES)


def shortfalls(client: Any, project: str, region: str, strategy: str,
               demand: dict[AcceleratorType, int]) -> list[Shortfall] | None:
    """The quotas the demand (accelerators per type, held at once) exceeds; [] when it fits or
    the strategy draws on no quota; None when the quota could not be read."""
    from airflow_gpu_sched.vertex.client import VertexError
    from airflow_gpu_sched.vertex.job_type_models import quota_limit

    wanted = {metric_for(acc, strategy): need for acc, need in demand.items()
              if strategy not in NO_QUOTA_STRATEGIES and not acc.is_tpu}
    if not wanted:
        return []
    try:
        infos = list(client.list_quota_infos(project))
    except VertexError:
        return None
    found = []
    for metric, need in wanted.items():
        limit = quota_limit(infos, metric, region)
        if limit is not None and limit > UNLIMITED and need > limit:  # -1: no limit at all
            found.append(Shortfall(metric, region, limit, need, project))
    return found
