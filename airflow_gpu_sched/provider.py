"""Provider registration: `airflow providers list` shows the package, its hook and connection
types (with their form in the UI), operators, triggers, extra link and `[gpu_sched]` config.

Kept cheap: Airflow calls it in every process that starts its providers manager; it imports
only data modules. Its documentation link is the `Documentation` project URL of the package
metadata (Airflow reads it there, not from this dict).

Checked against Airflow's ``provider_info.schema.json`` (tests/test_provider.py). Descriptions
are shown by ``airflow providers list|get`` after Airflow strips every `` ` _ < > `` (its
``_remove_rst_syntax``): they are written without those characters ("FLEX_START" would show
as "FLEXSTART"), which the test checks.

May import: hooks, orchestration; never airflow.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from airflow_gpu_sched import __version__, docs_page
from airflow_gpu_sched.hooks.connection_form import GOOGLE_PROVIDER, connection_types
from airflow_gpu_sched.orchestration import failure_patterns
from airflow_gpu_sched.vertex import console

INTEGRATION = "Vertex AI GPU training"
PREVIOUS_VERSIONS = ["0.1.0"]  # released before this one, newest first (CHANGELOG.md)
ASSETS = "airflow_gpu_sched.orchestration.assets"


def _installed(package: str) -> bool:
    try:
        distribution(package)
    except PackageNotFoundError:
        return False
    return True


def config() -> dict:
    """The `config` section: Airflow lists these options (`airflow config list`) with their defaults."""
    kinds = ", ".join(failure_patterns.KINDS)
    return {failure_patterns.SECTION: {
        "description": "GPU training on scarce capacity (airflow-gpu-sched).",
        "options": {failure_patterns.OPTION: {
            "description": "Your own patterns telling how a Vertex AI job failed, checked before the "
                           "built-in ones (against the job's error message and each ErrorInfo reason): "
                           f"a JSON object of kind -> list of case-insensitive regexes, kinds: {kinds}. "
                           "'preempted' and 'capacity_timeout' let a plan resubmit or fall back; "
                           "'failed' is the training code's failure. Read once per process.",
            "version_added": "0.1.0",
            "type": "string",
            "example": '{"preempted": ["host maintenance"], "failed": ["CUDA error"]}',
            "default": "",
        }, console.OPTION: {
            "description": "The host of the Google Cloud console the extra links and console URLs point to "
                           "(another universe, or a proxy in front of it). A host name only: an XCom link "
                           "that is not an https URL on this host is not shown.",
            "version_added": "0.2.0",
            "type": "string",
            "example": "console.cloud.google.com",
            "default": console.DEFAULT_DOMAIN,
        }, "deployment_id": {
            "description": "This Airflow deployment's id, set as the label airflow-deployment on every job "
                           "it submits: the reaper and jobs orphans act only on jobs with their own "
                           "deployment's id (" + docs_page("reaper") + "), so two deployments sharing a Google Cloud "
                           "project never cancel each other's jobs. Lowercase letters, digits, - and "
                           "underscore, at most 63 characters; the same in every component (scheduler, "
                           "workers, triggerers). Empty: the Airflow Variable airflow_gpu_sched_deployment_id, "
                           "which the first task to submit a job creates (dep- and 16 random hex digits), "
                           "kept in this deployment's metadata database.",
            "version_added": "0.2.0",
            "type": "string",
            "example": "prod-eu",
            "default": "",
        }, "reaper_interval": {
            "description": "Seconds between two passes of the triggerer's reaper (" + docs_page("reaper") + "): each "
                           "shared poller lists this package's active jobs of its region and cancels those "
                           "no live task try owns. 0 turns the reaper off.",
            "version_added": "0.2.0",
            "type": "float",
            "example": "300",
            "default": "300",
        }, "reaper_grace": {
            "description": "Seconds a job must have been seen with no live task try (on two reaper passes "
                           "at least this far apart) before the reaper cancels it.",
            "version_added": "0.2.0",
            "type": "float",
            "example": "600",
            "default": "600",
        }},
    }}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-gpu-sched",
        "name": "GPU training on scarce capacity (Vertex AI)",
        "description": "Vertex AI training on scarce GPUs: flex-start (Dynamic Workload Scheduler), "
                       "Spot VMs, reservations and persistent resources, with no duplicate or orphaned "
                       "jobs, and a local Vertex AI emulator.",
        "versions": [__version__, *PREVIOUS_VERSIONS],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_gpu_sched.hooks.vertex_training"]}],
        "connection-types": connection_types(google_provider_installed=_installed(GOOGLE_PROVIDER)),
        "extra-links": ["airflow_gpu_sched.operators.base.VertexCustomJobLink",
                        *(f"airflow_gpu_sched.operators.links.{name}" for name in (
                            "VertexTuningJobLink", "VertexTrainingPipelineLink", "VertexModelLink",
                            "VertexPersistentResourceLink", "VertexJobLogsLink"))],
        "triggers": [{"integration-name": INTEGRATION,
                      "python-modules": ["airflow_gpu_sched.triggers.job", "airflow_gpu_sched.triggers.capacity",
                                         "airflow_gpu_sched.triggers.race"]}],
        "operators": [{"integration-name": INTEGRATION,
                       "python-modules": ["airflow_gpu_sched.operators.base",  # GpuTrainingOperator
                                          "airflow_gpu_sched.operators.flex_start", "airflow_gpu_sched.operators.spot",
                                          "airflow_gpu_sched.operators.persistent"]}],
        "cli": ["airflow_gpu_sched.tools.airflow_cli.get_cli_commands"],  # `airflow gpu-sched ...`
        # the model Assets a training pipeline updates: vertex-ai://PROJECT/REGION/models/NAME
        "asset-uris": [{"schemes": ["vertex-ai"], "handler": f"{ASSETS}.sanitize_uri",
                        "factory": f"{ASSETS}.create_asset",
                        "to_openlineage_converter": f"{ASSETS}.convert_asset_to_openlineage"}],
        # the UI plugin (GPU training tab); also the airflow.plugins entry point, which is what
        # loads it while [core] lazy_discover_providers is on (Airflow's default), as OpenLineage does
        "plugins": [{"name": "airflow_gpu_sched", "plugin-class": "airflow_gpu_sched.ui.plugin.GpuSchedPlugin"}],
        "integrations": [{"integration-name": INTEGRATION,
                          "external-doc-url": "https://cloud.google.com/vertex-ai/docs/training/overview",
                          "tags": ["gcp"]}],
        "config": config(),
    }
