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


def _xcom(key: str, ti_key: Any, operator: Any = None) -> Any:
    if absent(operator, key):  # no read of what is not there: Airflow logs each miss as an [error]
        return None
    from airflow.sdk.execution_time.xcom import XCom

    return XCom.get_value(key=key, ti_key=ti_key)


# What the running try wrote, known only in the worker that runs it. Airflow asks every extra
# link for its URL at the end of each try (its finalize), the end of a deferring one included,
# and logs each XCom not found as an [error] line: in a green `airflow dags test` (no return
# value yet when the task defers) and beside a failed task's real error (no job, so no links)
# (issue 41). ``return_value`` is written by the process whose execute returns, the one that
# runs that finalize; ``console_links`` when the try's job is created, before it defers, so a
# try resumed with its job's event has it too. Elsewhere (the API server, a copy of the
# operator without the mark) nothing is known and the link reads the XCom.
XCOMS_MARK = "_gpu_sched_xcoms"


def start_try(operator: Any, resumed_with_job: bool = False) -> None:
    """An entry point of the operator starts: nothing of this try is written yet but the links of
    a job created before it deferred."""
    setattr(operator, XCOMS_MARK, {LINKS_KEY} if resumed_with_job else set())


def wrote(operator: Any, key: str) -> None:
    known = getattr(operator, XCOMS_MARK, None)
    if isinstance(known, set):
        known.add(key)


def absent(operator: Any, key: str) -> bool:
    """True only where it is known that this try has not written ``key``."""
    known = getattr(operator, XCOMS_MARK, None)
    return isinstance(known, set) and key not in known


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
        links = _xcom(LINKS_KEY, ti_key, operator)
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
        result = _xcom("return_value", ti_key, operator)
        if not isinstance(result, dict) or not isinstance(result.get("model_name"), str):
            return ""
        try:
            return checked(model_url(result["model_name"], result.get("model_version")))
        except ValueError:  # not projects/P/locations/L/models/ID
            return ""


LINKS = (VertexTuningJobLink(), VertexTrainingPipelineLink(), VertexModelLink(), VertexPersistentResourceLink(),
         VertexJobLogsLink())
