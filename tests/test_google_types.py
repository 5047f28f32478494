"""The checker of recorded traffic against Google's proto types: it passes Google-shaped
exchanges and names the field of each kind of violation. Plus the recorder at the wire."""

from __future__ import annotations

import json

import pytest
import requests

from tests.google_types import exchange_violations, format_violations, http_of_code, traffic_violations

JOB = {"displayName": "x", "labels": {"team": "ml"}, "jobSpec": {
    "workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                         "acceleratorCount": 1},
                         "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/t:1"}}],
    "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "1800s"}}}
PIPELINE = {"displayName": "p", "trainingTaskDefinition":
            "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml",
            "trainingTaskInputs": {"workerPoolSpecs": JOB["jobSpec"]["workerPoolSpecs"],
                                   "baseOutputDirectory": {"outputUriPrefix": "gs://b/o"}}}


def exchange(rpc="customJobs.create", request=None, status=200, response=None, query=()):
    as_text = lambda body: body if body is None or isinstance(body, str) else json.dumps(body)  # noqa: E731
    return {"rpc": rpc, "method": "POST", "path": "projects/p/locations/l/customJobs", "query": list(query),
            "requestBody": as_text(request), "status": status, "responseBody": as_text(response)}


def fields(violations):
    return [(v.part, v.field) for v in violations]


def test_google_shaped_exchanges_pass():
    done = {"name": "projects/p/locations/l/operations/1", "done": True,
            "metadata": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.CreatePersistentResourceOperationMetadata",
                         "genericMetadata": {"createTime": "2026-01-01T00:00:00Z"}},
            "response": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.PersistentResource",
                         "name": "projects/p/locations/l/persistentResources/r", "state": "RUNNING"}}
    quota_error = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota", "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
         "domain": "googleapis.com", "metadata": {"quota_limit": "x"}}]}}
    assert traffic_violations([
        exchange(request=JOB, response={**JOB, "name": "projects/p/locations/l/customJobs/1",
                                        "state": "JOB_STATE_QUEUED", "createTime": "2026-01-01T00:00:00.5Z"}),
        exchange("customJobs.list", query=[("filter", 'state="JOB_STATE_RUNNING"'), ("pageSize", "10")],
                 response={"nextPageToken": "t"}),  # an empty list is not printed
        exchange("customJobs.cancel", request={}, response={}),
        exchange("operations.get", response=done),
        exchange("trainingPipelines.create", request=PIPELINE, response=PIPELINE),
        exchange("customJobs.create", request=JOB, status=429, response=quota_error),
        exchange("quotaInfos.list", response={"quotaInfos": [{"name": "q", "quotaId": "x", "dimensions": ["region"],
                                                             "dimensionsInfos": [{"details": {"value": "-1"}}]}]}),
    ]) == []


def test_an_unknown_field_in_a_request_body_is_named():
    bad = json.loads(json.dumps(JOB))
    bad["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["gpus"] = 1
    assert fields(exchange_violations(exchange(request=bad, response=JOB))) == [
        ("request", "CustomJob.jobSpec.workerPoolSpecs[0].machineSpec")]


def test_response_violations_wrong_types_enums_and_any():
    assert fields(exchange_violations(exchange(request=JOB, response={**JOB, "state": "RUNNING"}))) == [
        ("response", "CustomJob.state")]  # a JobState is JOB_STATE_RUNNING
    unknown_any = {"name": "o", "done": True, "response": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.Nope"}}
    assert fields(exchange_violations(exchange("operations.get", response=unknown_any))) == [
        ("response", "Operation.response")]
    assert fields(exchange_violations(exchange("customJobs.cancel", request={}, response=None))) == [
        ("response", "<body>")]


def test_a_response_must_be_in_the_canonical_form_google_writes():
    as_numbers = json.loads(json.dumps(JOB))
    as_numbers["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = 1  # int64: a string on Google's wire
    as_numbers["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = 8  # an enum: its name
    assert fields(exchange_violations(exchange(request=as_numbers, response=as_numbers))) == [
        ("response", "CustomJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"),
        ("response", "CustomJob.jobSpec.workerPoolSpecs[0].replicaCount")]  # a request may use either form
    snake = {"display_name": "x"}
    assert fields(exchange_violations(exchange("customJobs.get", response=snake))) == [
        ("response", "CustomJob.display_name")]


def test_a_default_google_does_not_print_is_a_violation_and_a_field_with_presence_is_not():
    """Proto3 JSON as Google's servers print it (issue 40): recorded, an operation not yet done has
    no ``done`` key and an idle pool no ``usedReplicaCount``; ``replicaCount`` is proto3
    ``optional``, so a "0" that was set is printed."""
    running = {"name": "projects/p/locations/l/operations/1", "done": False, "metadata": {
        "@type": "type.googleapis.com/google.cloud.aiplatform.v1.CreatePersistentResourceOperationMetadata",
        "genericMetadata": {"createTime": "2026-01-01T00:00:00Z", "updateTime": "2026-01-01T00:00:00Z"}}}
    pool = {"name": "projects/p/locations/l/persistentResources/r", "state": "RUNNING", "resourcePools": [
        {"id": "a", "replicaCount": "0", "usedReplicaCount": "0", "autoscalingSpec": {"minReplicaCount": "0"},
         "machineSpec": {"machineType": "n1-standard-4", "acceleratorCount": 0}}]}
    listed = {"customJobs": [], "nextPageToken": ""}
    assert fields(exchange_violations(exchange("operations.get", response=running))) == [
        ("response", "Operation.done")]
    assert fields(exchange_violations(exchange("persistentResources.get", response=pool))) == [
        ("response", "PersistentResource.resourcePools[0].usedReplicaCount"),
        ("response", "PersistentResource.resourcePools[0].machineSpec.acceleratorCount")]
    assert fields(exchange_violations(exchange("customJobs.list", response=listed))) == [
        ("response", "ListCustomJobsResponse.customJobs"), ("response", "ListCustomJobsResponse.nextPageToken")]
    assert exchange_violations(exchange("operations.get", response={k: v for k, v in running.items()
                                                                       if k != "done"})) == []


def test_a_custom_task_pipelines_inputs_parse_into_custom_job_spec():
    bad = {**PIPELINE, "trainingTaskInputs": {**PIPELINE["trainingTaskInputs"], "maxWaitDuration": "60s"}}
    violations = exchange_violations(exchange("trainingPipelines.create", request=bad, response=PIPELINE))
    assert fields(violations) == [("request", "TrainingPipeline.trainingTaskInputs:CustomJobSpec")]
    assert "maxWaitDuration" in violations[0].message  # it belongs in scheduling


@pytest.mark.parametrize("error, field", [
    ({"code": 400, "message": "m", "status": "NOT_FOUND"}, "error.status"),  # NOT_FOUND is 404
    ({"code": 3, "message": "m", "status": "INVALID_ARGUMENT"}, "error.code"),  # the HTTP status, not the rpc code
    ({"code": 400, "message": "m", "status": "BAD"}, "error.status"),
    ({"code": 400, "message": "m", "status": "INVALID_ARGUMENT", "reason": "x"}, "error.reason"),
    ({"code": 400, "message": "m", "status": "INVALID_ARGUMENT",
      "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"path": "x"}]}]},
     "Status.details[0].fieldViolations[0]"),  # a FieldViolation's path is `field`
])
def test_error_body_violations(error, field):
    violations = exchange_violations(exchange(request=JOB, status=400, response={"error": error}))
    assert field in [v.field for v in violations], format_violations(violations)


def test_unknown_query_parameters_and_rpcs_are_violations():
    assert fields(exchange_violations(exchange("customJobs.get", query=[("updateTime", "x")], response=JOB))) == [
        ("query", "updateTime")]
    assert fields(exchange_violations(exchange("customJobs.get", request={}, response=JOB))) == [
        ("request", "<body>")]
    assert fields(exchange_violations(exchange("customJobs.frobnicate", response={}))) == [("rpc", "<rpc>")]


def test_http_mapping_is_read_from_googles_code_proto():
    assert http_of_code()["FAILED_PRECONDITION"] == 400 and http_of_code()["CANCELLED"] == 499
    assert len(http_of_code()) == 17


def test_the_emulator_records_exchanges_only_while_asked(emulator, parent):
    url = f"{emulator.url}/v1/{parent}/customJobs"
    requests.get(url, timeout=5)
    emulator.start_traffic()
    requests.post(url, json=JOB, timeout=5)
    requests.get(f"{emulator.url}/v1/{parent}/customJobs/nope", params={"alt": "json"}, timeout=5)
    recorded = emulator.traffic()
    assert [(e["rpc"], e["method"], e["status"]) for e in recorded] == [
        ("customJobs.create", "POST", 200), ("customJobs.get", "GET", 404)]
    assert json.loads(recorded[0]["requestBody"]) == JOB and recorded[1]["query"] == [["alt", "json"]]
    assert json.loads(recorded[0]["responseBody"])["state"] == "JOB_STATE_PENDING"  # recorded: create answers PENDING
    emulator.reset()
    requests.get(url, timeout=5)
    assert emulator.traffic() == []  # a reset stops the recording


# ------------------------------------------------------------------ our models against Google's messages


def _google_twins():
    """Each pydantic model and enum of ours -> the Google message / enum it stands for."""
    from google.cloud import aiplatform_v1 as aip
    from google.cloud import cloudquotas_v1 as quotas
    from google.longrunning import operations_pb2
    from google.rpc import status_pb2

    import airflow_gpu_sched.vertex.enums as en
    import airflow_gpu_sched.vertex.job_type_models as jtm
    import airflow_gpu_sched.vertex.models as m

    nested = {"Status": status_pb2.Status, "Operation": operations_pb2.Operation,
              "AutoscalingSpec": aip.ResourcePool.AutoscalingSpec, "MetricSpec": aip.StudySpec.MetricSpec,
              "ParameterSpec": aip.StudySpec.ParameterSpec,
              "DoubleValueSpec": aip.StudySpec.ParameterSpec.DoubleValueSpec,
              "IntegerValueSpec": aip.StudySpec.ParameterSpec.IntegerValueSpec,
              "CategoricalValueSpec": aip.StudySpec.ParameterSpec.CategoricalValueSpec,
              "DiscreteValueSpec": aip.StudySpec.ParameterSpec.DiscreteValueSpec,
              "TrialParameter": aip.Trial.Parameter, "MeasurementMetric": aip.Measurement.Metric}
    enums = {en.Strategy: aip.Scheduling.Strategy, en.AcceleratorType: aip.AcceleratorType, en.JobState: aip.JobState,
             en.PipelineState: aip.PipelineState, en.TrialState: aip.Trial.State,
             en.GoalType: aip.StudySpec.MetricSpec.GoalType, en.SearchAlgorithm: aip.StudySpec.Algorithm,
             en.ScaleType: aip.StudySpec.ParameterSpec.ScaleType,
             en.MeasurementSelectionType: aip.StudySpec.MeasurementSelectionType,
             en.PersistentResourceState: aip.PersistentResource.State}
    models = {}
    for module in (m, jtm):
        for name, cls in vars(module).items():
            if isinstance(cls, type) and issubclass(cls, m.VertexModel) and cls.__module__ == module.__name__ \
                    and cls is not m.VertexModel:
                models[cls] = nested.get(name) or getattr(aip, name, None) or getattr(quotas, name)
    return models, enums


def test_every_field_our_models_can_send_is_a_field_of_googles_message():
    models, _ = _google_twins()
    assert len(models) >= 25
    extra = {}
    for ours, google in models.items():
        descriptor = (google.pb(google()) if hasattr(google, "pb") else google()).DESCRIPTOR
        names = {f.json_name for f in descriptor.fields}
        aliases = {field.alias or name for name, field in ours.model_fields.items()}
        if aliases - names:
            extra[ours.__name__] = sorted(aliases - names)
    assert extra == {}


def test_our_enums_have_googles_names_and_numbers():
    from airflow_gpu_sched.vertex.enums import _ENUM_NUMBERS

    _, enums = _google_twins()
    for ours, google in enums.items():
        assert {e.value for e in ours} == {e.name for e in google}, ours.__name__
        numbers = _ENUM_NUMBERS.get(ours.__name__, {})
        assert all(google[name].value == number for number, name in numbers.items()), ours.__name__
