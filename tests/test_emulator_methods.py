"""What the emulator takes on each method's query string, checked against Google's definitions:
the per-rpc parameter table and the readMask schema table are vendored copies of the aiplatform v1
discovery document (and of google-cloud-quotas' request messages), so these tests keep them equal;
then the refusals and the readMask projection at the wire."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import requests

from airflow_gpu_sched.emulator import fieldmask, methods
from airflow_gpu_sched.emulator.urls import ROUTES
from tests.conftest import LOCATION, PROJECT

PREFIX = "GoogleCloudAiplatformV1"


def _discovery() -> dict:
    path = resources.files("googleapiclient") / "discovery_cache" / "documents" / "aiplatform.v1.json"
    return json.loads(path.read_text())


def _methods(node: dict) -> dict[str, dict]:
    found = {m["id"]: m for m in node.get("methods", {}).values()}
    for child in node.get("resources", {}).values():
        found.update(_methods(child))
    return found


def _short(schema: str) -> str:
    return schema[len(PREFIX):] if schema.startswith(PREFIX) else schema


def schema_graph(document: dict) -> dict[str, dict[str, str | None]]:
    """Each schema a readMask path may enter from the listed resources: field -> message schema or None."""
    schemas, graph = document["schemas"], {}

    def walk(name: str) -> None:
        if _short(name) in graph:
            return
        graph[_short(name)] = fields = {}
        for field, spec in sorted(schemas[name].get("properties", {}).items()):
            ref = spec.get("$ref")
            fields[field] = _short(ref) if ref and schemas[ref].get("properties") else None
            if fields[field]:
                walk(ref)

    for root in fieldmask.ROOTS.values():
        walk(PREFIX + root)
    return graph


# --- the vendored tables equal Google's definitions


def test_every_served_route_has_its_query_parameters_in_the_table():
    assert {rpc for _, _, rpc in ROUTES} == set(methods.QUERY_PARAMETERS)


def test_the_parameter_table_is_the_discovery_documents():
    document = _discovery()
    by_id = _methods(document)
    assert methods.GLOBAL_PARAMETERS == set(document["parameters"])
    for rpc, params in methods.QUERY_PARAMETERS.items():
        if rpc in methods.CLOUD_QUOTAS_RPCS:
            continue
        method = by_id[f"aiplatform.projects.locations.{rpc}"]
        documented = {n for n, p in method.get("parameters", {}).items() if p["location"] == "query"}
        assert set(params) == documented, rpc


def test_the_cloud_quotas_parameters_are_the_request_messages_fields():
    from google.cloud.cloudquotas_v1.types import GetQuotaInfoRequest, ListQuotaInfosRequest

    def query_fields(message) -> set[str]:  # every field but those bound in the path
        names = {f.name for f in message.meta.fields.values()} - {"parent", "name"}
        return {n.split("_")[0] + "".join(p.title() for p in n.split("_")[1:]) for n in names}

    assert set(methods.QUERY_PARAMETERS["quotaInfos.list"]) == query_fields(ListQuotaInfosRequest)
    assert set(methods.QUERY_PARAMETERS["quotaInfos.get"]) == query_fields(GetQuotaInfoRequest)


def test_the_read_mask_schemas_are_the_discovery_documents():
    graph = schema_graph(_discovery())
    vendored = {schema: fieldmask._fields(schema) for schema in fieldmask.SCHEMAS}
    assert vendored == graph


def test_read_mask_is_documented_on_exactly_the_lists_that_take_it():
    by_id = _methods(_discovery())
    for collection in fieldmask.ROOTS:
        assert "readMask" in by_id[f"aiplatform.projects.locations.{collection}.list"]["parameters"]
    assert "readMask" not in by_id["aiplatform.projects.locations.persistentResources.list"]["parameters"]


# --- at the wire


def _url(emulator, collection: str) -> str:
    return f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/{collection}"


def _job(emulator) -> dict:
    body = {"displayName": "m", "labels": {"team": "ml"}, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1"}}]}}
    response = requests.post(_url(emulator, "customJobs"), json=body, timeout=10)
    response.raise_for_status()
    return response.json()


@pytest.mark.parametrize(("collection", "params"), [
    ("customJobs", {"foo": "1"}),
    ("customJobs", {"page_size": "10"}),  # the JSON name is pageSize
    ("persistentResources", {"filter": 'labels.a="b"'}),  # persistentResources.list has no filter
    ("persistentResources", {"readMask": "name"}),
])
def test_a_query_parameter_the_method_lacks_is_refused_naming_it(emulator, collection, params):
    response = requests.get(_url(emulator, collection), params=params, timeout=10)
    (name,) = params
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == (f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
                                f"parameter. Field '{name}' could not be found in request message.")


def test_a_get_takes_no_method_parameters_but_the_system_ones(emulator):
    name = _job(emulator)["name"]
    assert requests.get(f"{emulator.url}/v1/{name}", params={"filter": "x"}, timeout=10).status_code == 400
    ok = requests.get(f"{emulator.url}/v1/{name}", params={"$alt": "json;enum-encoding=int", "prettyPrint": "false",
                                                           "$.xgafv": "2", "quotaUser": "u"}, timeout=10)
    assert ok.status_code == 200 and ok.json()["name"] == name


def test_cloud_quotas_take_their_paging_parameters(emulator):
    url = f"{emulator.url}/v1/projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com/quotaInfos"
    assert requests.get(url, params={"pageSize": "5", "pageToken": ""}, timeout=10).status_code == 200
    assert requests.get(url, params={"filter": "x"}, timeout=10).status_code == 400


def test_an_unsupported_filter_field_is_refused_naming_it_and_the_supported_ones(emulator):
    response = requests.get(_url(emulator, "customJobs"), params={"filter": 'update_time>="2026-11-30T00:00:00Z"'},
                            timeout=10)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "update_time" in message and "display_name, state, create_time, labels" in message
    response = requests.get(_url(emulator, "models"), params={"filter": "state=X"}, timeout=10)
    assert response.status_code == 400 and "'state'" in response.json()["error"]["message"]


def test_read_mask_projects_each_listed_resource(emulator):
    job = _job(emulator)
    response = requests.get(_url(emulator, "customJobs"),
                            params={"readMask": "name,state,jobSpec.workerPoolSpecs,labels"}, timeout=10)
    assert response.status_code == 200
    (listed,) = response.json()["customJobs"]
    assert listed == {"name": job["name"], "state": listed["state"], "labels": {"team": "ml"},
                      "jobSpec": {"workerPoolSpecs": job["jobSpec"]["workerPoolSpecs"]}}
    full = requests.get(_url(emulator, "customJobs"), timeout=10).json()["customJobs"][0]
    assert "createTime" in full and "displayName" in full  # no mask: everything


@pytest.mark.parametrize(("mask", "named"), [
    ("name,updateTimes", "updateTimes"),
    ("update_time", "update_time"),  # FieldMask JSON paths are lowerCamelCase
    ("jobSpec.workerPoolSpecs.machineSpec", "jobSpec.workerPoolSpecs.machineSpec"),  # a repeated field ends a path
])
def test_an_unknown_read_mask_path_is_refused_naming_it(emulator, mask, named):
    response = requests.get(_url(emulator, "customJobs"), params={"readMask": mask}, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and f'"{named}"' in error["message"]


def test_googles_own_sdk_lists_with_a_filter_and_a_read_mask(emulator):
    """google-cloud-aiplatform's REST transport sends ``$alt=json;enum-encoding=int`` and the
    FieldMask as camelCase paths: both must work."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.aiplatform_v1 import JobServiceClient
    from google.protobuf.field_mask_pb2 import FieldMask

    job = _job(emulator)
    client = JobServiceClient(credentials=AnonymousCredentials(), transport="rest",
                              client_options=ClientOptions(api_endpoint=emulator.url))
    pager = client.list_custom_jobs(request={
        "parent": f"projects/{PROJECT}/locations/{LOCATION}", "filter": 'labels.team="ml" AND state!="JOB_STATE_FAILED"',
        "read_mask": FieldMask(paths=["name", "create_time", "state"])})
    (listed,) = list(pager)
    assert listed.name == job["name"] and listed.create_time.year >= 2026
    assert listed.display_name == "" and not listed.job_spec.worker_pool_specs  # masked out
