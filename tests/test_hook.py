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
    read = result["read_async"].return_value
    assert (read["hook"], read["project"]) == ("VertexTrainingHook", PROJECT)
    # the emulator runs at speed 1: a loaded machine may take longer than the job's 1 s in QUEUED
    assert read["state"] in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"), read
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


# ---------------------------------------------------------------------- GoogleBaseHook's surface

def _service_account_key(email: str, project: str) -> dict:
    """A service account key file's content with a real (fresh, throwaway) RSA key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": project, "private_key_id": "k1", "private_key": pem,
            "client_email": email, "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}


def google_form_extras(**given) -> dict:
    """Every field of apache-airflow-providers-google 22.8.0's google_cloud_platform form
    (its get_provider_info ``conn-fields``), as the Airflow 3 UI stores them: empty text as "",
    the integer and boolean fields at their defaults."""
    extras = {name: "" for name in (
        "project", "key_path", "keyfile_dict", "credential_config_file", "scope", "key_secret_name",
        "key_secret_project_id", "impersonation_chain", "idp_issuer_url", "client_id", "client_secret",
        "idp_extra_parameters", "quota_project_id")}
    return {**extras, "num_retries": 5, "is_anonymous": False, **given}


def test_a_connection_made_with_the_google_providers_form_works_unchanged(vertex_conn, monkeypatch):
    """GoogleBaseHook's surface on a google_cloud_platform connection the Google provider's form
    wrote: credentials from its key, its project, the impersonation chain as GoogleBaseHook takes
    it, and a client that reaches Vertex AI (here the emulator, the one field added)."""
    import json

    from google.auth import impersonated_credentials
    from google.oauth2 import service_account

    from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

    email = "trainer@key-project.iam.gserviceaccount.com"
    key = json.dumps(_service_account_key(email, "key-project"))
    set_connection_env(monkeypatch, "google_form", "google_cloud_platform",
                       google_form_extras(project="form-project", keyfile_dict=key))

    hook = VertexTrainingHook(gcp_conn_id="google_form", location=LOCATION)
    credentials = hook.get_credentials()
    assert isinstance(credentials, service_account.Credentials) and credentials.service_account_email == email
    assert hook.project_id == "form-project"
    pair = hook.get_credentials_and_project_id()
    assert pair[0].service_account_email == email and pair[1] == "form-project"
    with hook.get_conn() as client:  # the real service's endpoint: no call made here
        parent = f"projects/{client.project}/locations/{LOCATION}"
        assert client.api.url(client.api.list_custom_jobs(parent)).startswith(
            f"https://{LOCATION}-aiplatform.googleapis.com/v1/projects/form-project/")

    acting = "acting@other-project.iam.gserviceaccount.com"
    impersonating = VertexTrainingHook(gcp_conn_id="google_form", impersonation_chain=acting)  # TypeError before
    chained = impersonating.get_credentials()
    assert isinstance(chained, impersonated_credentials.Credentials)
    assert chained.service_account_email == acting and chained._source_credentials.service_account_email == email
    assert VertexTrainingHook("google_form", [acting]).impersonation_chain == [acting]  # positional, as Google's

    # the same form plus the emulator's endpoint: a real round trip over HTTP, no credentials needed
    set_connection_env(monkeypatch, "google_form_emulated", "google_cloud_platform",
                       google_form_extras(project=PROJECT, api_endpoint=vertex_conn.url))
    emulated = VertexTrainingHook(gcp_conn_id="google_form_emulated", impersonation_chain=acting,
                                  location=LOCATION)
    assert emulated.get_credentials() is None and emulated.project_id == PROJECT
    with emulated.get_conn() as client:
        assert list(client.list_custom_jobs()) == []
