"""The connection types this package registers and their form in the Airflow UI, as data.

Decision (docs/guide.md, "Pointing it at real Vertex AI"): our own type ``vertex_gpu_sched`` is always
registered; ``google_cloud_platform`` (what the operators' default ``google_cloud_default`` is)
is registered by us only when the Google provider is not installed. Airflow's providers manager
sorts providers by package name and the first registration of a type wins, so "airflow-gpu-sched"
would take ``google_cloud_platform`` away from "apache-airflow-providers-google": with it
installed, its hook and form stay as they are. Either way the hook reads both types' connections,
whose extras use the same names (the Google provider's).

The field names and labels are the Google provider's (22.8.0, ``get_provider_info``; its client
credentials grant included), plus our ``api_endpoint``; the Airflow 3 UI stores each field in the connection's extra under its name.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

OWN_CONN_TYPE = "vertex_gpu_sched"
GOOGLE_CONN_TYPE = "google_cloud_platform"
GOOGLE_PROVIDER = "apache-airflow-providers-google"
HOOK_MODULE = "airflow_gpu_sched.hooks.vertex_training"


def _text(label: str, description: str | None = None, *, secret: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"]}
    if secret:
        schema["format"] = "password"  # masked in the form, and marked sensitive by Airflow
    field: dict[str, Any] = {"label": label, "schema": schema}
    if description:
        field["description"] = description
    return field


CONN_FIELDS: dict[str, dict[str, Any]] = {
    "project": _text("Project Id", "Default project for the jobs; else the key's own project."),
    "key_path": _text("Keyfile Path", "Path of a service account JSON key on the workers."),
    "keyfile_dict": _text("Keyfile JSON", "The content of a service account JSON key.", secret=True),
    "key_secret_name": _text("Keyfile Secret Name (in GCP Secret Manager)",
                             "A Secret Manager secret holding the JSON key."),
    "key_secret_project_id": _text("Keyfile Secret Project Id (in GCP Secret Manager)",
                                   "The project of that secret; else the project of Application Default Credentials."),
    "credential_config_file": _text("Credential Configuration File",
                                    "Workload identity federation: path or JSON of the credential config."),
    "impersonation_chain": _text("Impersonation Chain",
                                 "Service account(s) to impersonate, comma separated, the last one acts."),
    "scope": _text("Scopes (comma separated)", "Default: https://www.googleapis.com/auth/cloud-platform"),
    # the Google provider's client credentials grant (with a workload identity federation config in
    # credential_config_file): the IdP's token is exchanged at STS (vertex/client/auth.py)
    "idp_issuer_url": _text("IdP Token Issue URL (Client Credentials Grant Flow)",
                            "https URL of your identity provider's token endpoint; with Client ID, Client "
                            "Secret and a Credential Configuration File."),
    "client_id": _text("Client ID (Client Credentials Grant Flow)"),
    "client_secret": _text("Client Secret (Client Credentials Grant Flow)", secret=True),
    "idp_extra_parameters": _text("IdP Extra Request Parameters",
                                  'JSON object of extra form fields for the IdP request, e.g. {"audience": "..."}.'),
    "api_endpoint": _text("API endpoint", "Vertex AI base URL, e.g. http://127.0.0.1:8080 for the "
                          "emulator. Empty: https://LOCATION-aiplatform.googleapis.com"),
}

# The host/login/... of a generic connection mean nothing here; all is in the fields above.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "schema", "login", "password", "port"],
    "relabeling": {},
    "placeholders": {},
}


def connection_types(google_provider_installed: bool) -> list[dict[str, Any]]:
    """The ``connection-types`` entries of the provider info."""
    def entry(conn_type: str, hook_class: str, hook_name: str) -> dict[str, Any]:
        return {"connection-type": conn_type, "hook-class-name": f"{HOOK_MODULE}.{hook_class}",
                "hook-name": hook_name, "conn-fields": deepcopy(CONN_FIELDS),
                "ui-field-behaviour": deepcopy(UI_FIELD_BEHAVIOUR)}

    types = [entry(OWN_CONN_TYPE, "VertexTrainingHook", "Vertex AI GPU training")]
    if not google_provider_installed:
        types.append(entry(GOOGLE_CONN_TYPE, "GoogleCloudConnectionHook", "Google Cloud"))
    return types
