"""The Airflow Assets a training task updates, and what each event says: decisions only.

A task's outlets are what its user declares (``outlets=[Asset(...)]``); when they declare none,
the operator derives them when the DAG is parsed:

- the output directory: ``base_output_dir`` up to its first template, cut back to the last
  ``/`` (``gs://bucket/nightly/{{ ds_nodash }}`` -> ``Asset("gs://bucket/nightly")``): one
  Asset for the night's outputs, each event naming that run's directory in ``output_dir``;
  none when the bucket itself is templated;
- for a training pipeline, the model: :func:`model_asset` of the project, region and
  ``model_display_name`` (when none of them is a template), each event naming the registered
  resource and version (``model_name``, ``model_version``).

The ``vertex-ai`` scheme is registered in the provider info (``asset-uris``): Airflow normalizes
every ``vertex-ai://`` URI with :func:`sanitize_uri` (refusing one that does not name a project,
region and model), builds one with :func:`create_asset`, and gives OpenLineage the same dataset
as the operator's own facets (:func:`convert_asset_to_openlineage`).

Every Asset among the outlets gets the same extra on success (:func:`event_extra`): the job,
its strategy and state, the attempts, GPU-hours and cost (estimates, as in the return value),
the output directory and, for a pipeline, the model and version. A DAG scheduled on the model
Asset reads them from its triggering event.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.parse import SplitResult

MODEL_SCHEME = "vertex-ai"
EXTRA_KEYS = ("job_name", "strategy", "state", "attempts", "gpu_hours", "cost", "currency", "output_dir",
              "console_url", "model_name", "model_version")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def model_asset_uri(project_id: str, location: str, model_display_name: str) -> str:
    """``vertex-ai://<project>/<region>/models/<display name>``: the model's resource id is only
    known once it is registered, its display name is what a DAG names it by."""
    return f"{MODEL_SCHEME}://{project_id}/{location}/models/{model_display_name}"


def model_asset(project_id: str, location: str, model_display_name: str) -> Any:
    """The Asset a training pipeline of that model updates (schedule a deploy DAG on it)."""
    from airflow.sdk import Asset

    return Asset(name=f"vertex-model:{project_id}/{location}/{model_display_name}",
                 uri=model_asset_uri(project_id, location, model_display_name), group="model")


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normalizer for ``vertex-ai://`` Asset URIs (after its own: scheme lowercased,
    trailing ``/``, query and fragment dropped): ``vertex-ai://PROJECT/REGION/models/NAME``,
    project and region lowercased (Google's ids are), the model's display name as given."""
    parts = uri.path.lstrip("/").split("/", 2)
    if not uri.netloc or len(parts) != 3 or parts[1] != "models" or not parts[0] or not parts[2]:
        raise ValueError(f"a {MODEL_SCHEME}:// Asset URI is {MODEL_SCHEME}://PROJECT/REGION/models/DISPLAY_NAME, "
                         f"got {uri.geturl()!r}")
    return uri._replace(netloc=uri.netloc.lower(), path=f"/{parts[0].lower()}/models/{parts[2]}")


def create_asset(*, project_id: str, location: str, model_display_name: str, extra: dict | None = None) -> Any:
    """The provider info's Asset factory for the scheme: the model Asset (:func:`model_asset`)."""
    asset = model_asset(project_id, location, model_display_name)
    if extra:
        asset.extra.update(extra)
    return asset


def convert_asset_to_openlineage(asset: Any, lineage_context: Any = None) -> Any:
    """The OpenLineage dataset of a ``vertex-ai://`` Asset: namespace ``vertex-ai://PROJECT/REGION``,
    name ``models/NAME``, as the operator's own lineage facets name the model."""
    from openlineage.client.event_v2 import Dataset

    project_and_region, _, name = asset.uri.partition("/models/")
    return Dataset(namespace=project_and_region, name=f"models/{name}")


def output_dir_uri(base_output_dir: Any) -> str | None:
    """The output-directory Asset's URI: ``base_output_dir`` up to its first template."""
    if not isinstance(base_output_dir, str) or not base_output_dir.startswith("gs://"):
        return None
    path = base_output_dir.removeprefix("gs://")
    if _templated(path):
        cut = min(i for i in (path.find("{{"), path.find("{%")) if i >= 0)
        path = path[:cut].rsplit("/", 1)[0] if "/" in path[:cut] else ""
    path = path.rstrip("/")
    return f"gs://{path}" if path else None  # a templated bucket: no Asset of its own


def default_outlets(project_id: Any, location: Any, job_type: str, base_output_dir: Any,
                    model_display_name: Any) -> list[Any]:
    from airflow.sdk import Asset

    found = []
    uri = output_dir_uri(base_output_dir)
    if uri:
        found.append(Asset(uri=uri))
    if job_type == "training_pipeline" and all(
            isinstance(v, str) and v and not _templated(v) for v in (project_id, location, model_display_name)):
        found.append(model_asset(project_id, location, model_display_name))
    return found


def event_extra(result: dict[str, Any]) -> dict[str, Any]:
    """The extra of every outlet's event: from the task's return value, JSON-safe."""
    extra = {
        "job_name": result.get("job_name"), "strategy": result.get("strategy"), "state": result.get("state"),
        "attempts": len(result.get("attempts") or []), "gpu_hours": result.get("gpu_hours"),
        "cost": result.get("cost"), "currency": result.get("currency"),
        "output_dir": result.get("base_output_dir"), "console_url": result.get("console_url"),
    }
    if "model_name" in result:
        extra.update(model_name=result.get("model_name"), model_version=result.get("model_version"))
    return extra
