"""OpenLineage for a training task: inputs, outputs and a ``gpuTraining`` run facet.

Imported only by :func:`lineage.facets_on_complete`, i.e. by the OpenLineage provider's
listener: ``apache-airflow-providers-openlineage`` (and ``openlineage-python``) are needed only
where that provider is installed, never to import or run the operators.

- inputs: every ``gs://`` URI the job's arguments name (``--data=gs://b/d/train.jsonl`` or a
  bare ``gs://...`` argument), in the operator's ``args`` and each pool's ``containerSpec.args``;
- outputs: the rendered ``base_output_dir`` (GCS naming: namespace ``gs://<bucket>``, name the
  path), and for a training pipeline the registered model (namespace
  ``vertex-ai://<project>/<region>``, name ``models/<display name>``; the resource and version
  in its ``version`` dataset facet);
- run facet ``gpuTraining``: strategy, job, state, attempts (strategy, region, state,
  GPU-hours, cost each), preemptions observed, GPU-hours and cost (estimates), currency.

May import: orchestration, operators; airflow.
"""

from __future__ import annotations

import re
from typing import Any

import attr
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import RunFacet, dataset_version_dataset

from airflow_gpu_sched.orchestration.assets import MODEL_SCHEME

GCS_URI = re.compile(r"gs://[a-z0-9][a-z0-9._-]*(?:/[^\s,;]*)?")


@attr.define
class GpuTrainingRunFacet(RunFacet):
    """What the training cost: on which strategy, in how many attempts, at how many GPU-hours."""

    strategy: str | None = attr.field(default=None)
    jobName: str | None = attr.field(default=None)  # noqa: N815 (OpenLineage facets are camelCase)
    state: str | None = attr.field(default=None)
    attempts: list[dict[str, Any]] = attr.field(factory=list)
    preemptions: int = attr.field(default=0)
    gpuHours: float = attr.field(default=0.0)  # noqa: N815
    cost: float | None = attr.field(default=None)
    currency: str | None = attr.field(default=None)
    # _schemaURL: the spec's RunFacet, which this extends (no schema of its own is published)


def gcs_dataset(uri: str) -> Dataset:
    bucket, _, path = uri.removeprefix("gs://").partition("/")
    return Dataset(namespace=f"gs://{bucket}", name=path.rstrip("/") or "/")


def input_uris(operator: Any) -> list[str]:
    """The gs:// URIs the job's arguments name, in order, once each (the output dir excluded)."""
    args = [*(operator.args or [])]
    pools = operator.worker_pool_specs if isinstance(operator.worker_pool_specs, list) else []
    for pool in pools:
        if isinstance(pool, dict):  # REST JSON, as the Vertex docs write it
            args += (pool.get("containerSpec") or pool.get("container_spec") or {}).get("args") or []
        elif getattr(pool, "container_spec", None) is not None:  # a WorkerPoolSpec model
            args += pool.container_spec.args or []
    out = (operator.base_output_dir or "").rstrip("/")
    found = [m.group(0).rstrip("/") for a in args if isinstance(a, str) for m in GCS_URI.finditer(a)]
    return [u for u in dict.fromkeys(found) if u != out]


def operator_lineage(operator: Any, result: dict[str, Any]) -> Any:
    from airflow.providers.openlineage.extractors import OperatorLineage

    outputs = []
    out_dir = result.get("base_output_dir") or operator.base_output_dir
    if isinstance(out_dir, str) and out_dir.startswith("gs://"):
        outputs.append(gcs_dataset(out_dir))
    if result.get("model_name") or operator.job_type == "training_pipeline":
        version = {"version": dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=f"{result['model_name']}@{result.get('model_version')}")} if result.get("model_name") else {}
        outputs.append(Dataset(namespace=f"{MODEL_SCHEME}://{operator.project_id}/{operator.location}",
                               name=f"models/{operator.model_display_name}", facets=version))
    attempts = [{k: a.get(k) for k in ("strategy", "location", "state", "gpu_hours", "cost")}
                for a in result.get("attempts") or []]
    facet = GpuTrainingRunFacet(strategy=result.get("strategy"), jobName=result.get("job_name"),
                                state=result.get("state"), attempts=attempts,
                                preemptions=int(result.get("preemptions") or 0),
                                gpuHours=float(result.get("gpu_hours") or 0.0), cost=result.get("cost"),
                                currency=result.get("currency"))
    return OperatorLineage(inputs=[gcs_dataset(u) for u in input_uris(operator)], outputs=outputs,
                           run_facets={"gpuTraining": facet})
