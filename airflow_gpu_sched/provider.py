"""Provider registration: `airflow providers list` shows the package, its hook and connection
types (with their form in the UI), operators, triggers, extra link and `[gpu_sched]` config.

Kept cheap: Airflow calls it in every process that starts its providers manager; it imports
only data modules. Its documentation link is the `Documentation` project URL of the package
metadata (Airflow reads it there, not from this dict).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution, version

from airflow_gpu_sched.hooks.connection_form import GOOGLE_PROVIDER, connection_types
from airflow_gpu_sched.orchestration import failure_patterns

INTEGRATION = "Vertex AI GPU training"


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
        }},
    }}


def get_provider_info() -> dict:
    try:
        current = version("airflow-gpu-sched")
    except PackageNotFoundError:
        current = "0.0.0"
    return {
        "package-name": "airflow-gpu-sched",
        "name": "GPU training on scarce capacity (Vertex AI)",
        "description": "Vertex AI training under FLEX_START, SPOT and persistent resources, "
                       "with no duplicate or orphaned jobs, and a local Vertex AI emulator.",
        "versions": [current],
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
        "integrations": [{"integration-name": INTEGRATION,
                          "external-doc-url": "https://cloud.google.com/vertex-ai/docs/training/overview",
                          "tags": ["gcp"]}],
        "config": config(),
    }
