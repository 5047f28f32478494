"""The emulator refuses request bodies as Google's JSON front end does, at the wire (raw HTTP).

Google's SDK cannot send an unknown field, so these tests post raw JSON. The known fields are
the vendored table's (airflow_gpu_sched/vertex/data/request_schema.json), which must equal what
the installed discovery document and aiplatform_v1 protos give.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from airflow_gpu_sched.vertex import request_schema as schema
from tests.conftest import LOCATION, PROJECT

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"


def post(emulator, path: str, body, **params) -> requests.Response:
    return requests.post(f"{emulator.url}/v1/{path}", data=json.dumps(body), params=params, timeout=10,
                         headers={"Content-Type": "application/json"})


def job(**top) -> dict:
    return {"displayName": "strict", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
        "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/trainer:1"}}]}, **top}


def refused(response: requests.Response) -> list[tuple[str | None, str]]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
    (detail,) = error["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    violations = [(v.get("field"), v["description"]) for v in detail["fieldViolations"]]
    assert error["message"] == "\n".join(d for _, d in violations)  # one line per violation
    return violations


# ---------------------------------------------------------------------------- the vendored table


def test_vendored_table_is_what_the_discovery_document_and_protos_give():
    path = schema.resources.files("airflow_gpu_sched.vertex") / "data" / schema.TABLE
    assert path.read_text(encoding="utf-8") == schema.dumps(schema.generate()), (
        "regenerate: python -m airflow_gpu_sched.vertex.request_schema --regenerate")


def test_body_fields_of_the_table_are_the_gapic_http_rules_bodies():
    from google.cloud.aiplatform_v1.services.job_service.transports.rest_base import _BaseJobServiceRestTransport
    from google.cloud.aiplatform_v1.services.persistent_resource_service.transports.rest_base import (
        _BasePersistentResourceServiceRestTransport,
    )
    from google.cloud.aiplatform_v1.services.pipeline_service.transports.rest_base import (
        _BasePipelineServiceRestTransport,
    )

    rules = {"customJobs.create": _BaseJobServiceRestTransport._BaseCreateCustomJob,
             "customJobs.cancel": _BaseJobServiceRestTransport._BaseCancelCustomJob,
             "hyperparameterTuningJobs.create": _BaseJobServiceRestTransport._BaseCreateHyperparameterTuningJob,
             "hyperparameterTuningJobs.cancel": _BaseJobServiceRestTransport._BaseCancelHyperparameterTuningJob,
             "trainingPipelines.create": _BasePipelineServiceRestTransport._BaseCreateTrainingPipeline,
             "trainingPipelines.cancel": _BasePipelineServiceRestTransport._BaseCancelTrainingPipeline,
             "persistentResources.create":
                 _BasePersistentResourceServiceRestTransport._BaseCreatePersistentResource,
             "persistentResources.patch":
                 _BasePersistentResourceServiceRestTransport._BaseUpdatePersistentResource}
    assert {rpc: rules[rpc]._get_http_options()[0]["body"] for rpc, *_ in schema.METHODS} == {
        rpc: body for rpc, _, _, body in schema.METHODS}


def test_the_emulator_imports_neither_googleapiclient_nor_googles_protos():
    code = ("import sys, airflow_gpu_sched.emulator.app as a, airflow_gpu_sched.emulator.strict_json as s; "
            "s.body_errors('customJobs.create', {}); "
            "print(sorted(m for m in sys.modules if m.startswith(('googleapiclient', 'google.cloud.aiplatform'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------- unknown names


def test_an_unknown_top_level_field_is_refused_in_googles_words(emulator):
    assert refused(post(emulator, f"{PARENT}/customJobs", job(x=1))) == [
        ("custom_job", "Invalid JSON payload received. Unknown name \"x\" at 'custom_job': Cannot find field.")]


def test_unknown_nested_fields_are_each_named_with_the_proto_path(emulator):
    body = job()
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    pool["replicas"] = 2
    pool["machineSpec"]["gpuType"] = "A100"
    assert refused(post(emulator, f"{PARENT}/customJobs", body)) == [  # in the body's order
        ("custom_job.job_spec.worker_pool_specs[0].machine_spec",
         "Invalid JSON payload received. Unknown name \"gpuType\" at "
         "'custom_job.job_spec.worker_pool_specs[0].machine_spec': Cannot find field."),
        ("custom_job.job_spec.worker_pool_specs[0]", "Invalid JSON payload received. Unknown name \"replicas\" at "
                                                     "'custom_job.job_spec.worker_pool_specs[0]': Cannot find field.")]
    assert emulator.stats()["jobsCreated"] == {}  # refused before anything was made


def test_a_cancel_body_with_an_unknown_field_is_refused_and_an_empty_one_accepted(emulator):
    name = post(emulator, f"{PARENT}/customJobs", job()).json()["name"]
    assert refused(post(emulator, f"{name}:cancel", {"force": True})) == [
        (None, 'Invalid JSON payload received. Unknown name "force": Cannot find field.')]
    assert post(emulator, f"{name}:cancel", {}).status_code == 200


@pytest.mark.parametrize(("path", "body", "root"), [
    ("hyperparameterTuningJobs", {"displayName": "t", "maxTrials": 2}, "hyperparameter_tuning_job"),
    ("trainingPipelines", {"displayName": "p", "inputs": {}}, "training_pipeline"),
    ("persistentResources", {"displayName": "r", "pools": []}, "persistent_resource"),
])
def test_every_create_refuses_unknown_names(emulator, path, body, root):
    key = next(k for k in body if k != "displayName")
    params = {"persistentResourceId": "r1"} if path == "persistentResources" else {}  # the others refuse it
    response = post(emulator, f"{PARENT}/{path}", body, **params)
    assert refused(response) == [
        (root, f"Invalid JSON payload received. Unknown name \"{key}\" at '{root}': Cannot find field.")]


def test_fields_google_accepts_that_our_models_lack_are_accepted_and_kept(emulator):
    body = job(encryptionSpec={"kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k"})
    body["jobSpec"].update(network="projects/1/global/networks/n", reservedIpRanges=["r"],
                           tensorboard=f"{PARENT}/tensorboards/1", enableWebAccess=True)
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"] = {
        "reservationAffinityType": "ANY_RESERVATION"}
    created = post(emulator, f"{PARENT}/customJobs", body)
    assert created.status_code == 200, created.text
    spec = created.json()["jobSpec"]
    assert spec["network"] == "projects/1/global/networks/n" and spec["reservedIpRanges"] == ["r"]
    assert created.json()["encryptionSpec"]["kmsKeyName"].endswith("cryptoKeys/k")


def test_proto_names_enum_numbers_and_int64_numbers_are_accepted_as_protojson_says(emulator):
    body = {"display_name": "snake", "job_spec": {"worker_pool_specs": [{
        "machine_spec": {"machine_type": "a2-highgpu-1g", "accelerator_type": 8, "accelerator_count": "1"},
        "replica_count": 1, "container_spec": {"image_uri": "gcr.io/p/trainer:1"}}],
        "scheduling": {"strategy": 6, "max_wait_duration": "1800s"}}, "labels": None}
    created = post(emulator, f"{PARENT}/customJobs", body)
    assert created.status_code == 200, created.text
    pool = created.json()["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_A100" and pool["replicaCount"] == "1"
    assert created.json()["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"


def test_a_single_value_for_a_repeated_field_is_taken_as_its_one_element(emulator):
    # protobuf's JSON converter checks "is repeating" only when a list starts
    body = job()
    body["jobSpec"]["workerPoolSpecs"] = body["jobSpec"]["workerPoolSpecs"][0]
    body["jobSpec"]["workerPoolSpecs"]["containerSpec"]["args"] = "--epochs=3"
    created = post(emulator, f"{PARENT}/customJobs", body)
    assert created.status_code == 200, created.text
    assert created.json()["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == ["--epochs=3"]


def test_two_members_of_a_oneof_are_refused(emulator):
    body = job()
    body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"] = {
        "executorImageUri": "gcr.io/p/x:1", "packageUris": ["gs://b/t.tar.gz"], "pythonModule": "t.m"}
    assert refused(post(emulator, f"{PARENT}/customJobs", body)) == [
        ("custom_job.job_spec.worker_pool_specs[0]", "Invalid value at 'custom_job.job_spec.worker_pool_specs[0]' "
         "(oneof), oneof field 'task' is already set. Cannot set 'pythonPackageSpec'")]


@pytest.mark.parametrize("body", [[], "job", 7])
def test_a_body_that_is_not_an_object_is_refused(emulator, body):
    assert refused(post(emulator, f"{PARENT}/customJobs", body)) == [
        (None, 'Invalid JSON payload received. Unknown name "": Root element must be a message.')]


# ---------------------------------------------------------------------------- wrong JSON types


@pytest.mark.parametrize(("change", "expected"), [
    (lambda b: b["jobSpec"]["workerPoolSpecs"][0].update(replicaCount="abc"),
     ("custom_job.job_spec.worker_pool_specs[0].replica_count",
      "Invalid value at 'custom_job.job_spec.worker_pool_specs[0].replica_count' (TYPE_INT64), \"abc\"")),
    (lambda b: b["jobSpec"].update(scheduling={"strategy": "CHEAPEST"}),
     ("custom_job.job_spec.scheduling.strategy",
      "Invalid value at 'custom_job.job_spec.scheduling.strategy' "
      "(type.googleapis.com/google.cloud.aiplatform.v1.Scheduling.Strategy), \"CHEAPEST\"")),
    (lambda b: b["jobSpec"].update(scheduling={"maxWaitDuration": "1h"}),
     ("custom_job.job_spec.scheduling.max_wait_duration",
      "Invalid value at 'custom_job.job_spec.scheduling.max_wait_duration' "
      "(type.googleapis.com/google.protobuf.Duration), Field 'maxWaitDuration', "
      "Illegal duration format; duration must end with 's'")),
    (lambda b: b.update(jobSpec="abc"),
     ("custom_job.job_spec", "Invalid value at 'custom_job.job_spec' "
                             "(type.googleapis.com/google.cloud.aiplatform.v1.CustomJobSpec), \"abc\"")),
    (lambda b: b.update(displayName={"text": "x"}),
     ("custom_job", "Invalid value at 'custom_job' (display_name), Starting an object on a scalar field")),
    (lambda b: b.update(displayName=["x"]),
     ("custom_job", "Invalid JSON payload received. Unknown name \"displayName\" at 'custom_job': "
                    "Proto field is not repeating, cannot start list.")),
    (lambda b: b.update(labels={"team": 7}),
     ("custom_job.labels[0].value", "Invalid value at 'custom_job.labels[0].value' (TYPE_STRING), 7")),
])
def test_wrong_json_types_are_refused_in_googles_words(emulator, change, expected):
    body = job()
    change(body)
    assert refused(post(emulator, f"{PARENT}/customJobs", body)) == [expected]


@pytest.mark.parametrize("seed", ["seed_000_flex_start.json", "seed_001_spot.json"])
def test_googles_documented_bodies_and_what_our_models_make_of_them_parse(seed):
    from airflow_gpu_sched.emulator.strict_json import body_errors
    from airflow_gpu_sched.vertex.models import CustomJob
    from tests.conftest import load_seed

    body = load_seed(seed)
    assert body_errors("customJobs.create", body) == []
    assert body_errors("customJobs.create", CustomJob.model_validate(body).to_api()) == []
