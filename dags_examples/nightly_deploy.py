"""Nightly deploy: runs when ``nightly_retraining_tuned`` registered a new version of the model.

Scheduled on the model's Asset (``model_asset``): the training pipeline task of
``nightly_retraining_tuned`` emits an event for it on success, whose extra names the registered
model and version, the job, its strategy, GPU-hours and cost. This DAG reads that event, checks
the model version in Vertex AI, and hands it to the deployment (deploying to an endpoint,
``endpoints.deployModel``, is outside this package: the last task says what it would deploy).

A run the scheduler starts on the Asset reads the event that triggered it
(``triggering_asset_events``); a manual run (``airflow dags test nightly_deploy``, as
``make demo`` does after the tuned pipeline) reads the Asset's latest event (``inlet_events``).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from _settings import LOCATION, PROJECT_ID
from airflow_gpu_sched.operators import model_asset

MODEL = model_asset(PROJECT_ID, LOCATION, "nightly-model")

with DAG(
    dag_id="nightly_deploy",
    schedule=[MODEL],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["gpu-training", "example"],
    doc_md=__doc__,
):

    @task(inlets=[MODEL])
    def new_model_version(triggering_asset_events=None, inlet_events=None) -> dict:
        """The event that says which version to deploy, and what training it cost."""
        # indexed, never looked up in a dict: Airflow 3.1's Asset cannot be hashed (its __hash__ hashes a dict)
        events = list(triggering_asset_events[MODEL]) if triggering_asset_events else []
        how = "the event that triggered this run"
        if not events:  # a manual run: the latest version registered
            events, how = list(inlet_events[MODEL])[-1:], "the Asset's latest event"
        if not events:
            raise ValueError(f"no event for {MODEL.uri}: run nightly_retraining_tuned first")
        extra = dict(events[-1].extra)
        print(f"from {how}: {extra['model_name']} version {extra['model_version']}, trained by "
              f"{extra['job_name']} on {extra['strategy']} in {extra['attempts']} attempt(s), "
              f"{extra['gpu_hours']:.3f} GPU-hours" + (f", {extra['cost']:.2f} {extra['currency']}"
                                                       if extra.get("cost") is not None else ""))
        return extra

    @task
    def check_model(extra: dict) -> dict:
        """The version exists in the Model Registry, with its serving container."""
        from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

        client = VertexTrainingHook(location=LOCATION).get_client()
        model = client.get_model(f"{extra['model_name']}@{extra['model_version']}")
        serving = model.container_spec.image_uri if model.container_spec else None
        if not serving:
            raise ValueError(f"{model.name}@{model.version_id} has no serving container")
        return {"model": model.name, "version": model.version_id, "serving_image": serving,
                "artifact_uri": model.artifact_uri}

    @task
    def deploy(checked: dict) -> dict:
        """Where a team's deployment goes (endpoints.deployModel, a canary, an evaluation gate)."""
        print(f"would deploy {checked['model']}@{checked['version']} ({checked['serving_image']})")
        return checked

    deploy(check_model(new_model_version()))
