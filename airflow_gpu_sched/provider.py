"""Provider registration: `airflow providers list` shows the package, its extra link and triggers."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


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
        "extra-links": ["airflow_gpu_sched.operators.base.VertexCustomJobLink",
                        *(f"airflow_gpu_sched.operators.links.{name}" for name in (
                            "VertexTuningJobLink", "VertexTrainingPipelineLink", "VertexModelLink",
                            "VertexPersistentResourceLink", "VertexJobLogsLink"))],
        "triggers": [{"integration-name": "Vertex AI GPU training",
                      "python-modules": ["airflow_gpu_sched.triggers.job", "airflow_gpu_sched.triggers.capacity"]}],
        "operators": [{"integration-name": "Vertex AI GPU training",
                       "python-modules": ["airflow_gpu_sched.operators.flex_start", "airflow_gpu_sched.operators.spot",
                                          "airflow_gpu_sched.operators.persistent"]}],
        "integrations": [{"integration-name": "Vertex AI GPU training",
                          "external-doc-url": "https://cloud.google.com/vertex-ai/docs/training/overview",
                          "tags": ["gcp"]}],
    }
