"""Provider registration and DAG-parse cost of the operators module."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest


def test_the_package_registers_as_an_airflow_provider(airflow_db):
    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_gpu_sched")]
    info = ep.load()()
    assert info["package-name"] == "airflow-gpu-sched"
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-gpu-sched" in manager.providers
    assert "airflow_gpu_sched.operators.base.VertexCustomJobLink" in manager.extra_links_class_names


def test_importing_the_operators_does_not_import_the_clients():
    code = ("import sys, airflow_gpu_sched.operators; "
            "print(sorted(m for m in ('requests', 'google.auth', 'airflow_gpu_sched.vertex.client') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


HOOK = "airflow_gpu_sched.hooks.vertex_training"
GOOGLE_HOOK = "airflow.providers.google.common.hooks.base_google.GoogleBaseHook"


def _google_provider_installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("apache-airflow-providers-google")
    except PackageNotFoundError:
        return False
    return True


def _ui_meta() -> dict:
    """What the UI's connection form is built from: the API's hook metadata, by connection type."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    HookMetaService.hook_meta_data.cache_clear()
    return {m.connection_type: m for m in HookMetaService.hook_meta_data()}


def test_the_providers_manager_lists_the_hook_connection_types_and_their_form(airflow_db):
    from airflow.providers_manager import ProvidersManager
    try:  # the task SDK's own manager (3.3); 3.1/3.2 tasks read the core one
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
    except ImportError:
        from airflow.providers_manager import ProvidersManager as ProvidersManagerTaskRuntime

    from airflow_gpu_sched.hooks.connection_form import CONN_FIELDS

    manager = ProvidersManager()
    hooks = ProvidersManagerTaskRuntime().hooks  # what Connection.get_hook() reads in a task
    own = hooks["vertex_gpu_sched"]
    assert own.connection_testable  # the form gets a Test button
    assert (own.hook_class_name, own.connection_id_attribute_name, own.package_name) == (
        f"{HOOK}.VertexTrainingHook", "gcp_conn_id", "airflow-gpu-sched")
    gcp = hooks["google_cloud_platform"]
    if _google_provider_installed():  # the Google provider keeps its type; we add none
        assert gcp.hook_class_name == GOOGLE_HOOK
    else:  # without it, ours makes google_cloud_default editable in the UI
        assert (gcp.hook_class_name, gcp.package_name) == (f"{HOOK}.GoogleCloudConnectionHook", "airflow-gpu-sched")
    assert {"api_endpoint", "project", "keyfile_dict", "impersonation_chain"} <= set(CONN_FIELDS)
    widget = manager.connection_form_widgets["extra__vertex_gpu_sched__keyfile_dict"]
    assert widget.is_sensitive and widget.field_name == "keyfile_dict"
    assert {f"extra__vertex_gpu_sched__{name}" for name in CONN_FIELDS} <= set(manager.connection_form_widgets)
    assert "extra" not in manager.field_behaviours["vertex_gpu_sched"]["hidden_fields"]  # extras stay editable
    meta = _ui_meta()["vertex_gpu_sched"]
    assert meta.hook_name == "Vertex AI GPU training" and set(meta.extra_fields) == set(CONN_FIELDS)
    assert meta.extra_fields["api_endpoint"]["schema"]["title"] == "API endpoint"
    assert meta.standard_fields.host.hidden and meta.standard_fields.login.hidden


def test_get_provider_info_lists_operators_triggers_links_and_the_config_option(airflow_db):
    from airflow.configuration import conf
    from airflow.providers_manager import ProvidersManager

    from airflow_gpu_sched.orchestration.failure_patterns import parse_user_patterns

    manager = ProvidersManager()
    info = manager.providers["airflow-gpu-sched"].data
    modules = [m for group in info["operators"] for m in group["python-modules"]]
    assert "airflow_gpu_sched.operators.base" in modules  # GpuTrainingOperator
    for module in modules + [m for group in info["hooks"] for m in group["python-modules"]]:
        __import__(module)
    triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == "airflow-gpu-sched"}
    assert triggers == {"airflow_gpu_sched.triggers.job", "airflow_gpu_sched.triggers.capacity",
                        "airflow_gpu_sched.triggers.race"}
    assert "airflow_gpu_sched.operators.base.VertexCustomJobLink" in manager.extra_links_class_names
    configs = dict(manager.provider_configs)["airflow-gpu-sched"]
    option = configs["gpu_sched"]["options"]["failure_patterns"]
    assert option["type"] == "string" and parse_user_patterns(option["example"])  # the example is valid
    assert conf.get("gpu_sched", "failure_patterns") == option["default"] == ""  # merged into Airflow's conf


GOOGLE_22_8_0 = {  # the google_cloud_platform entry of apache-airflow-providers-google 22.8.0's provider info
    "hook-class-name": GOOGLE_HOOK, "hook-name": "Google Cloud", "connection-type": "google_cloud_platform",
    "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                           "relabeling": {}, "placeholders": {}},
    "conn-fields": {"project": {"label": "Project Id", "schema": {"type": ["string", "null"]}},
                    "num_retries": {"label": "Number of Retries",
                                    "schema": {"type": ["integer", "null"], "default": 5}}},
}

WITH_GOOGLE = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
from airflow.providers_manager import ProvidersManager

meta = {m.connection_type: m for m in HookMetaService.hook_meta_data()}
print(json.dumps({t: {"hook": meta[t].hook_class_name, "fields": sorted(meta[t].extra_fields or {})}
                  for t in ("google_cloud_platform", "vertex_gpu_sched")}
                 | {"providers": sorted(ProvidersManager().providers)}))
"""


def test_with_the_google_provider_installed_its_google_cloud_platform_form_stays(airflow_db, tmp_path):
    """A stand-in distribution named apache-airflow-providers-google (its real entry, trimmed):
    our package then registers only its own type, so Google's hook and form are untouched."""
    import json
    import os

    dist = tmp_path / "apache_airflow_providers_google-22.8.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: apache-airflow-providers-google\nVersion: 22.8.0\n")
    (dist / "entry_points.txt").write_text("[apache_airflow_provider]\nprovider_info = google_stand_in:info\n")
    (tmp_path / "google_stand_in.py").write_text(
        "def info():\n    return " + repr({"package-name": "apache-airflow-providers-google", "name": "Google",
                                           "description": "stand-in", "connection-types": [GOOGLE_22_8_0]}) + "\n")
    repo = str(__import__("pathlib").Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), repo])}
    run = subprocess.run([sys.executable, "-c", WITH_GOOGLE], capture_output=True, text=True, env=env,
                         cwd=repo, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "apache-airflow-providers-google" in out["providers"]
    assert out["google_cloud_platform"]["hook"] == GOOGLE_HOOK
    assert out["google_cloud_platform"]["fields"] == ["num_retries", "project"]  # Google's, none of ours
    assert out["vertex_gpu_sched"]["hook"] == f"{HOOK}.VertexTrainingHook"
    assert "api_endpoint" in out["vertex_gpu_sched"]["fields"]


FORM_VALUES = {"project": "p", "key_path": "/keys/sa.json", "keyfile_dict": '{"type": "service_account"}',
               "key_secret_name": "sa-key", "key_secret_project_id": "secrets-project",
               "credential_config_file": "/etc/wif.json",
               "impersonation_chain": "a@p.iam.gserviceaccount.com", "scope": "https://x/y",
               "api_endpoint": "https://europe-west4-aiplatform.googleapis.com"}


# the client credentials grant: its fields are read together (with a credential config file)
GRANT_VALUES = {"idp_issuer_url": "https://idp.example/oauth2/token", "client_id": "airflow-client",
                "client_secret": "grant-s3cret", "idp_extra_parameters": '{"audience": "api://gcp"}'}


@pytest.mark.parametrize("name", list(FORM_VALUES))
def test_every_field_of_the_form_is_read_by_the_client(name):
    from airflow_gpu_sched.hooks.connection_form import CONN_FIELDS
    from airflow_gpu_sched.vertex.client.auth import ConnectionSettings

    assert set(FORM_VALUES) | set(GRANT_VALUES) == set(CONN_FIELDS)
    for extras in ({name: FORM_VALUES[name]}, {f"extra__google_cloud_platform__{name}": FORM_VALUES[name]}):
        assert ConnectionSettings.from_extras(extras) != ConnectionSettings.from_extras({}), extras


def test_the_form_has_the_client_credentials_grant_the_client_supports():
    """The Google provider's four grant fields, under its names and labels; the secret masked;
    the form's values (as the UI stores them, the old prefix too) are the grant the client uses,
    and a grant missing a field is refused naming it."""
    from airflow_gpu_sched.hooks.connection_form import CONN_FIELDS
    from airflow_gpu_sched.vertex.client.auth import ConnectionSettings

    assert CONN_FIELDS["client_secret"]["schema"]["format"] == "password"
    assert all("format" not in CONN_FIELDS[n]["schema"] for n in ("idp_issuer_url", "client_id", "idp_extra_parameters"))
    assert CONN_FIELDS["idp_issuer_url"]["label"] == "IdP Token Issue URL (Client Credentials Grant Flow)"
    for prefix in ("", "extra__google_cloud_platform__"):
        extras = {prefix + k: v for k, v in {**GRANT_VALUES, "credential_config_file": "/etc/wif.json"}.items()}
        settings = ConnectionSettings.from_extras(extras)
        assert (settings.idp_issuer_url, settings.client_id, settings.client_secret, settings.idp_extra_params) == (
            "https://idp.example/oauth2/token", "airflow-client", "grant-s3cret", {"audience": "api://gcp"})
        assert "grant-s3cret" not in repr(settings)
    with pytest.raises(ValueError, match="missing: client_secret, credential_config_file"):
        ConnectionSettings.from_extras({k: v for k, v in GRANT_VALUES.items() if k != "client_secret"})


# ---------------------------------------------------------------------- provider info complete

def _schema() -> dict:
    import json
    from pathlib import Path

    import airflow

    return json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())


def test_the_provider_info_is_valid_against_airflows_schema():
    import jsonschema

    from airflow_gpu_sched import __version__
    from airflow_gpu_sched.provider import get_provider_info

    info = get_provider_info()
    jsonschema.validate(info, _schema())  # the schema Airflow's own providers are checked against
    assert info["versions"][0] == __version__  # the version is written once (airflow_gpu_sched/__init__.py)
    for entry in info["asset-uris"] + [{"handler": p["plugin-class"]} for p in info["plugins"]]:
        for key in ("handler", "factory", "to_openlineage_converter"):
            if entry.get(key):
                module, _, name = entry[key].rpartition(".")
                assert callable(getattr(__import__(module, fromlist=[name]), name)), entry[key]


def test_descriptions_survive_airflows_formatting():
    """`airflow providers list|get` strip every ` _ < > from the description (its
    _remove_rst_syntax): "FLEX_START" would show as "FLEXSTART"."""
    from airflow.cli.commands.provider_command import _remove_rst_syntax

    from airflow_gpu_sched.provider import get_provider_info

    info = get_provider_info()
    assert _remove_rst_syntax(info["description"]) == info["description"].strip(" \n.")
    assert "flex-start" in _remove_rst_syntax(info["description"])


def test_vertex_ai_asset_uris_are_registered_and_normalized(airflow_db):
    from airflow.sdk import Asset
    try:  # the task SDK's own manager (3.3); 3.1/3.2 tasks read the core one
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
    except ImportError:
        from airflow.providers_manager import ProvidersManager as ProvidersManagerTaskRuntime

    from airflow_gpu_sched.orchestration.assets import convert_asset_to_openlineage, create_asset, model_asset

    assert "vertex-ai" in ProvidersManagerTaskRuntime().asset_uri_handlers
    assert Asset(uri="VERTEX-AI://My-Project/US-Central1/models/Nightly-Model/").uri == (
        "vertex-ai://my-project/us-central1/models/Nightly-Model")  # project and region lowercased, name kept
    for bad in ("vertex-ai:///us-central1/models/m", "vertex-ai://p/us-central1/m", "vertex-ai://p/us-central1/models/"):
        with pytest.raises(ValueError, match="vertex-ai://PROJECT/REGION/models/DISPLAY_NAME"):
            Asset(uri=bad)
    made = create_asset(project_id="p", location="us-central1", model_display_name="m", extra={"k": 1})
    assert made.uri == model_asset("p", "us-central1", "m").uri and made.extra == {"k": 1}
    dataset = convert_asset_to_openlineage(made)
    assert (dataset.namespace, dataset.name) == ("vertex-ai://p/us-central1", "models/m")  # as lineage_facets.py


def test_airflow_lists_the_provider_its_scheme_and_plugin_as_users_see_them(airflow_db):
    """`airflow providers get airflow-gpu-sched --full -o json`, in its own process."""
    import json
    import os
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    airflow = str(Path(sys.executable).with_name("airflow"))
    run = subprocess.run([airflow, "providers", "get", "airflow-gpu-sched", "--full", "-o", "json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [info] = json.loads(run.stdout[run.stdout.index("["):])
    assert "flex-start (Dynamic Workload Scheduler)" in info["description"]
    assert [a["schemes"] for a in info["asset-uris"]] == [["vertex-ai"]]
    assert info["plugins"] == [{"name": "airflow_gpu_sched", "plugin-class": "airflow_gpu_sched.ui.plugin.GpuSchedPlugin"}]
