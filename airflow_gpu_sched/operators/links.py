"""Extra links of the training operators: one per job type, the persistent resource, the model a
training pipeline registered, and the job's logs in Cloud Logging.

The URLs are decided here (pure, :func:`console_links`) when the job is created and kept in
one XCom, ``console_links`` ({link key: URL}); the model's comes from the task's return value
(``model_name``, ``model_version``) once the pipeline has succeeded. Each link reads its entry
and is empty ("" : Airflow shows it disabled) when the task's job is of another type. The URL
shapes follow the Google provider's Vertex AI links (``/vertex-ai/locations/{region}/...``).

Every link is on the console's host (``vertex/console.py``: ``https://console.cloud.google.com``
or ``[gpu_sched] console_domain``), built and checked there: an XCom entry that is not an
``https://`` URL on that host (``javascript:...``, another site, a bad resource name) gives no
link, never the text as is.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from airflow_gpu_sched.vertex.console import console_root, is_console_url

LINKS_KEY = "console_links"
MODEL_NAME = re.compile(r"projects/(?P<project>[a-z0-9][a-z0-9-]{0,62})/locations/(?P<location>[a-z0-9-]{1,63})/"
                        r"models/(?P<id>[A-Za-z0-9_-]{1,128})(?:@[A-Za-z0-9_-]{1,128})?")
_KINDS = {"customJobs": "custom_job", "hyperparameterTuningJobs": "tuning_job",
          "trainingPipelines": "training_pipeline"}


def console_links(job_name: str, persistent_resource_id: str | None = None) -> dict[str, str]:
    """``{link key: URL}`` for a job (``projects/P/locations/L/<collection>/ID``)."""
    from airflow_gpu_sched.orchestration.accounting import console_url

    _, project, _, location, collection, job_id = job_name.split("/")
    links = {_KINDS[collection]: console_url(job_name), "logs": logs_url(project, job_id)}
    if persistent_resource_id:
        links["persistent_resource"] = (f"{console_root()}/vertex-ai/locations/{location}/persistent-resources/"
                                        f"{persistent_resource_id}?project={project}")
    return links


def logs_url(project: str, job_id: str) -> str:
    """Cloud Logging's Logs Explorer on the job's logs: Vertex AI training writes them under
    the ``ml_job`` resource with the job's id (a tuning job's trials and a pipeline's training
    run log under the id of the job submitted)."""
    query = f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"'
    return f"{console_root()}/logs/query;query={quote(query, safe='')}?project={project}"


def model_url(model_name: str, version: str | None = None) -> str:
    """``projects/P/locations/L/models/ID`` (optionally ``@version``) -> the model's console page;
    ValueError for anything else (it comes from an XCom: no ``..`` or query goes into the URL)."""
    found = MODEL_NAME.fullmatch(model_name)
    if not found or (version is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", str(version))):
        raise ValueError(f"not a model resource name: {model_name!r}")
    project, location, model_id = found.group("project", "location", "id")
    return (f"{console_root()}/vertex-ai/models/locations/{location}/models/{model_id}/versions/"
            f"{version or 'default'}/properties?project={project}")


def _xcom(key: str, ti_key: Any) -> Any:
    from airflow.sdk.execution_time.xcom import XCom

    return XCom.get_value(key=key, ti_key=ti_key)


def checked(url: Any) -> str:
    """``url`` when it is an https URL on the console's host; else "" (Airflow shows no link).
    A misconfigured ``console_domain`` also gives no link: the UI page must not fail."""
    try:
        return url if is_console_url(url) else ""
    except ValueError:
        return ""


class ConsoleLink(BaseOperatorLink):
    """A link whose URL is the ``key`` entry of the task's ``console_links`` XCom."""

    key = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        links = _xcom(LINKS_KEY, ti_key)
        return checked(links.get(self.key)) if isinstance(links, dict) else ""


class VertexTuningJobLink(ConsoleLink):
    """The hyperparameter tuning job's trials page."""

    name = "Vertex AI Tuning Job"
    key = "tuning_job"


class VertexTrainingPipelineLink(ConsoleLink):
    name = "Vertex AI Training Pipeline"
    key = "training_pipeline"


class VertexPersistentResourceLink(ConsoleLink):
    """The persistent resource the job ran on (steps of strategy PERSISTENT_RESOURCE)."""

    name = "Vertex AI Persistent Resource"
    key = "persistent_resource"


class VertexJobLogsLink(ConsoleLink):
    name = "Training Logs"
    key = "logs"


class VertexModelLink(BaseOperatorLink):
    """The model a training pipeline registered (from the task's return value)."""

    name = "Vertex AI Model"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        result = _xcom("return_value", ti_key)
        if not isinstance(result, dict) or not isinstance(result.get("model_name"), str):
            return ""
        try:
            return checked(model_url(result["model_name"], result.get("model_version")))
        except ValueError:  # not projects/P/locations/L/models/ID
            return ""


LINKS = (VertexTuningJobLink(), VertexTrainingPipelineLink(), VertexModelLink(), VertexPersistentResourceLink(),
         VertexJobLogsLink())
