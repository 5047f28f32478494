"""The hook inside ``@task`` functions: its clients talk to the emulator over HTTP, for a
connection of our own type and for an existing ``google_cloud_platform`` one, unchanged."""

from __future__ import annotations

import socket
from datetime import datetime, timezone

import pytest
import requests

from tests.airflow_harness import run_dag, set_connection_env
from tests.conftest import LOCATION, PROJECT, load_seed

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_tasks_create_and_list_jobs_through_the_hook(airflow_db, vertex_conn, monkeypatch):
    from airflow.sdk import DAG, BaseHook, task

    # our own type, as the form writes it; google_cloud_default (vertex_conn) is a google_cloud_platform one
    set_connection_env(monkeypatch, "vertex_training", "vertex_gpu_sched",
                       {"project": PROJECT, "api_endpoint": vertex_conn.url})
    seed = load_seed("seed_000_flex_start.json")

    with DAG("hook_in_tasks", schedule=None, start_date=START) as dag:
        @task
        def submit() -> str:
            from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook
            from airflow_gpu_sched.vertex.models import CustomJob

            with VertexTrainingHook("vertex_training", location=LOCATION).get_client() as client:
                return client.create_custom_job(CustomJob.model_validate(seed)).name

        @task
        def listed_by_the_default_connection(name: str) -> list[str]:
            from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

            with VertexTrainingHook().get_client(location=LOCATION) as client:  # google_cloud_default
                return [job.name for job in client.list_custom_jobs() if job.name == name]

        @task
        def read_async(name: str) -> dict:
            import asyncio

            hook = BaseHook.get_hook("vertex_training")  # the class the providers manager registered

            async def read() -> str:
                client = await hook.aget_async_client(location=LOCATION)
                return (await client.get_custom_job(name)).state.value

            return {"hook": type(hook).__name__, "state": asyncio.run(read()),
                    "project": hook.get_async_client(location=LOCATION).project}

        name = submit()
        listed_by_the_default_connection(name)
        read_async(name)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    name = result["submit"].return_value
    assert name.startswith(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/")
    assert result["listed_by_the_default_connection"].return_value == [name]
    assert result["read_async"].return_value == {"hook": "VertexTrainingHook", "state": "JOB_STATE_QUEUED",
                                                 "project": PROJECT}
    job = requests.get(f"{vertex_conn.url}/v1/{name}", timeout=5).json()  # the emulator holds it
    assert job["displayName"] == seed["displayName"]


def test_a_client_without_a_location_is_refused_before_the_connection_is_read():
    from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

    hook = VertexTrainingHook("no_such_connection")
    with pytest.raises(ValueError, match="location is required"):
        hook.get_client()
    assert VertexTrainingHook.default_conn_name == "google_cloud_default"  # the operators' default
    assert VertexTrainingHook.conn_name_attr == "gcp_conn_id"


def test_the_ui_test_button_lists_a_job_and_reports_what_went_wrong(vertex_conn, monkeypatch):
    from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

    set_connection_env(monkeypatch, "vertex_training", "vertex_gpu_sched",
                       {"project": PROJECT, "api_endpoint": vertex_conn.url})
    assert VertexTrainingHook("vertex_training").test_connection() == (
        True, f"Listed custom jobs of project {PROJECT!r} in us-central1")
    vertex_conn.set_auth(access_token="a-token-the-connection-has-not", require_token=True)
    ok, message = VertexTrainingHook("vertex_training").test_connection()
    assert not ok and "401" in message and "a-token" not in message, message
    vertex_conn.set_auth()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    set_connection_env(monkeypatch, "unreachable", "vertex_gpu_sched", {"project": PROJECT, "api_endpoint": closed})
    ok, message = VertexTrainingHook("unreachable", location="europe-west4").test_connection()
    assert not ok and message.startswith("VertexTransportError") and "europe-west4" in message, message
