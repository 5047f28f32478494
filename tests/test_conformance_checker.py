"""Tests for the discovery-document conformance checker itself."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from tests.conformance import conformance_errors, load_discovery

CUSTOM_JOB = "GoogleCloudAiplatformV1CustomJob"

VALID_JOB: dict[str, Any] = {
    "name": "projects/p/locations/us-central1/customJobs/1",
    "displayName": "x",
    "state": "JOB_STATE_QUEUED",
    "createTime": "2026-11-30T17:00:00.123456Z",
    "labels": {"a": "b"},
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "machineSpec": {
                    "machineType": "a2-highgpu-1g",
                    "acceleratorType": "NVIDIA_TESLA_A100",
                    "acceleratorCount": 1,
                },
                "replicaCount": "1",
                "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
                "containerSpec": {"imageUri": "python:3.10", "command": ["sleep"], "args": ["100"]},
            }
        ],
        "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "1800s"},
    },
}


def mutated(change: Callable[[dict], None]) -> dict:
    job = copy.deepcopy(VALID_JOB)
    change(job)
    return job


def pool(job: dict) -> dict:
    return job["jobSpec"]["workerPoolSpecs"][0]


def test_discovery_document_loads_and_is_cached() -> None:
    doc = load_discovery()
    assert doc["name"] == "aiplatform"
    assert doc["version"] == "v1"
    assert CUSTOM_JOB in doc["schemas"]
    assert load_discovery() is doc


def test_valid_custom_job_has_no_errors() -> None:
    assert conformance_errors(VALID_JOB, CUSTOM_JOB) == []


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda j: j.update(createTime="2026-11-30T17:00:00+05:30"), id="datetime-offset"),
        pytest.param(lambda j: j.update(createTime="2026-11-30T17:00:00.123456789Z"), id="datetime-nanos"),
        pytest.param(lambda j: j.update(createTime="2026-11-30T17:00:00Z"), id="datetime-no-fraction"),
        pytest.param(lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration="0.5s"), id="duration-fraction"),
        pytest.param(lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration="-3s"), id="duration-negative"),
        pytest.param(lambda j: pool(j).update(replicaCount="-1"), id="int64-negative"),
        pytest.param(lambda j: j.update(labels={}), id="empty-labels"),
        pytest.param(lambda j: j.update(error={"code": 9, "message": "m", "details": [{"@type": "t", "x": [1]}]}), id="status-free-form-details"),
        pytest.param(lambda j: j["jobSpec"]["scheduling"].update(disableRetries=False), id="boolean"),
    ],
)
def test_valid_variants_are_accepted(change: Callable[[dict], None]) -> None:
    assert conformance_errors(mutated(change), CUSTOM_JOB) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda j: pool(j).update(replicaCount=1),
            "jobSpec.workerPoolSpecs[0].replicaCount: expected string (int64), got int 1",
            id="int64-as-number",
        ),
        pytest.param(
            lambda j: pool(j).update(replicaCount="1.0"),
            "jobSpec.workerPoolSpecs[0].replicaCount: expected int64 as a string of digits",
            id="int64-not-digits",
        ),
        pytest.param(
            lambda j: j.update(foo=1),
            f"foo: field 'foo' is not in {CUSTOM_JOB}",
            id="unknown-top-level-field",
        ),
        pytest.param(
            lambda j: j["jobSpec"].update(workerPoolSpec=[]),
            "jobSpec.workerPoolSpec: field 'workerPoolSpec' is not in GoogleCloudAiplatformV1CustomJobSpec",
            id="unknown-field-via-ref",
        ),
        pytest.param(
            lambda j: pool(j)["machineSpec"].update(gpuCount=1),
            "jobSpec.workerPoolSpecs[0].machineSpec.gpuCount: field 'gpuCount' is not in "
            "GoogleCloudAiplatformV1MachineSpec",
            id="unknown-field-in-array-item",
        ),
        pytest.param(
            lambda j: j.update(display_name="x"),
            "display_name: field 'display_name' is not in",
            id="snake-case-field",
        ),
        pytest.param(
            lambda j: j.update(state="RUNNING"),
            "state: 'RUNNING' is not one of JOB_STATE_UNSPECIFIED",
            id="bad-enum",
        ),
        pytest.param(
            lambda j: j.update(state=3),
            "state: expected string, got int 3",
            id="enum-as-int",
        ),
        pytest.param(
            lambda j: pool(j)["machineSpec"].update(acceleratorType="A100"),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: 'A100' is not one of",
            id="bad-enum-nested",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration="1800"),
            "jobSpec.scheduling.maxWaitDuration: expected duration",
            id="duration-without-unit",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration="30m"),
            "jobSpec.scheduling.maxWaitDuration: expected duration",
            id="duration-minutes",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration="1.0000000001s"),
            "jobSpec.scheduling.maxWaitDuration: expected duration",
            id="duration-too-precise",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["scheduling"].update(maxWaitDuration=1800),
            "jobSpec.scheduling.maxWaitDuration: expected string (google-duration), got int",
            id="duration-as-number",
        ),
        pytest.param(
            lambda j: j.update(createTime="2026-11-30T17:00:00"),
            "createTime: expected RFC 3339 timestamp",
            id="datetime-naive",
        ),
        pytest.param(
            lambda j: j.update(createTime="2026-11-30 17:00:00Z"),
            "createTime: expected RFC 3339 timestamp",
            id="datetime-space",
        ),
        pytest.param(
            lambda j: j.update(createTime="2026-02-30T17:00:00Z"),
            "createTime: expected RFC 3339 timestamp",
            id="datetime-impossible-date",
        ),
        pytest.param(
            lambda j: j.update(createTime=1764522000),
            "createTime: expected string (google-datetime), got int",
            id="datetime-epoch",
        ),
        pytest.param(
            lambda j: pool(j)["machineSpec"].update(acceleratorCount="1"),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount: expected integer (int32), got str",
            id="int32-as-string",
        ),
        pytest.param(
            lambda j: pool(j)["machineSpec"].update(acceleratorCount=True),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount: expected integer (int32), got bool",
            id="int32-as-bool",
        ),
        pytest.param(
            lambda j: pool(j)["machineSpec"].update(acceleratorCount=2.0),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount: expected integer (int32), got float",
            id="int32-as-float",
        ),
        pytest.param(
            lambda j: pool(j)["diskSpec"].update(bootDiskSizeGb=2**31),
            "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb: 2147483648 out of range for int32",
            id="int32-overflow",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["scheduling"].update(disableRetries="false"),
            "jobSpec.scheduling.disableRetries: expected boolean, got str",
            id="boolean-as-string",
        ),
        pytest.param(
            lambda j: j.update(displayName=5),
            "displayName: expected string, got int 5",
            id="string-as-int",
        ),
        pytest.param(
            lambda j: pool(j)["containerSpec"].update(command="sleep"),
            "jobSpec.workerPoolSpecs[0].containerSpec.command: expected array, got str",
            id="array-as-string",
        ),
        pytest.param(
            lambda j: pool(j)["containerSpec"].update(args=["100", 100]),
            "jobSpec.workerPoolSpecs[0].containerSpec.args[1]: expected string, got int 100",
            id="bad-array-item",
        ),
        pytest.param(
            lambda j: j["jobSpec"].update(workerPoolSpecs={"0": {}}),
            "jobSpec.workerPoolSpecs: expected array, got dict",
            id="array-as-object",
        ),
        pytest.param(
            lambda j: j.update(jobSpec=[]),
            "jobSpec: expected object, got list",
            id="object-as-array",
        ),
        pytest.param(
            lambda j: j.update(error=None),
            "error: expected object, got null",
            id="null-message",
        ),
        pytest.param(
            lambda j: j.update(labels={"a": 1}),
            "labels.a: expected string, got int 1",
            id="additional-properties-value",
        ),
        pytest.param(
            lambda j: j["jobSpec"]["workerPoolSpecs"].append({"replicaCount": 2}),
            "jobSpec.workerPoolSpecs[1].replicaCount: expected string (int64), got int 2",
            id="second-array-item",
        ),
    ],
)
def test_violations_are_reported(change: Callable[[dict], None], expected: str) -> None:
    errors = conformance_errors(mutated(change), CUSTOM_JOB)
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors


def test_multiple_violations_are_all_reported() -> None:
    job = mutated(lambda j: (j.update(foo=1, state="BAD"), pool(j).update(replicaCount=1)))
    errors = conformance_errors(job, CUSTOM_JOB)
    assert len(errors) == 3
    assert {e.split(":")[0] for e in errors} == {"foo", "state", "jobSpec.workerPoolSpecs[0].replicaCount"}


def test_root_must_be_object() -> None:
    assert conformance_errors([], CUSTOM_JOB) == ["<root>: expected object, got list"]


def test_unknown_schema_name_raises() -> None:
    with pytest.raises(KeyError, match="NoSuchSchema"):
        conformance_errors({}, "NoSuchSchema")


@pytest.mark.parametrize(
    ("value", "n_errors"),
    [
        pytest.param({"name": "op", "done": True, "metadata": {"@type": "x", "any": [1, {"a": None}]}}, 0, id="free-form-metadata"),
        pytest.param({"name": "op", "response": {"@type": "x", "nested": {"deep": 1}}}, 0, id="free-form-response"),
        pytest.param({"name": "op", "done": "yes"}, 1, id="done-not-bool"),
        pytest.param({"name": "op", "error": {"code": "3"}}, 1, id="status-code-as-string"),
        pytest.param({"name": "op", "error": {"details": {}}}, 1, id="status-details-not-array"),
        pytest.param({"name": "op", "result": {}}, 1, id="unknown-operation-field"),
    ],
)
def test_long_running_operation(value: dict, n_errors: int) -> None:
    errors = conformance_errors(value, "GoogleLongrunningOperation")
    assert len(errors) == n_errors, errors


def test_list_response_checks_each_job() -> None:
    bad = mutated(lambda j: j.update(state="RUNNING"))
    value = {"customJobs": [VALID_JOB, bad], "nextPageToken": "t"}
    errors = conformance_errors(value, "GoogleCloudAiplatformV1ListCustomJobsResponse")
    assert len(errors) == 1
    assert errors[0].startswith("customJobs[1].state: 'RUNNING' is not one of")


def test_number_accepts_int_and_float_but_not_bool() -> None:
    # Pick any schema property of type number from the document to stay honest.
    schemas = load_discovery()["schemas"]
    name, prop = next(
        (n, p)
        for n, s in schemas.items()
        for p, spec in s.get("properties", {}).items()
        if spec.get("type") == "number"
    )
    assert conformance_errors({prop: 1}, name) == []
    assert conformance_errors({prop: 1.5}, name) == []
    errors = conformance_errors({prop: True}, name)
    assert errors == [f"{prop}: expected number, got bool"]
    assert conformance_errors({prop: "1.5"}, name) == [f"{prop}: expected number, got str"]


def test_uint64_rejects_negative() -> None:
    schemas = load_discovery()["schemas"]
    name, prop = next(
        (n, p)
        for n, s in schemas.items()
        for p, spec in s.get("properties", {}).items()
        if spec.get("format") == "uint64"
    )
    assert conformance_errors({prop: "7"}, name) == []
    assert conformance_errors({prop: "-7"}, name)[0].startswith(f"{prop}: expected uint64")


TUNING_JOB = "GoogleCloudAiplatformV1HyperparameterTuningJob"
VALID_TUNING_JOB: dict[str, Any] = {
    "name": "projects/p/locations/us-central1/hyperparameterTuningJobs/1",
    "displayName": "t", "maxTrialCount": 2, "parallelTrialCount": 1, "state": "JOB_STATE_SUCCEEDED",
    "studySpec": {"algorithm": "GRID_SEARCH", "metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
                  "parameters": [{"parameterId": "n", "integerValueSpec": {"minValue": "1", "maxValue": "4"}}]},
    "trialJobSpec": VALID_JOB["jobSpec"],
    "trials": [{"id": "1", "state": "SUCCEEDED", "customJob": "projects/p/locations/us-central1/customJobs/2",
                "parameters": [{"parameterId": "n", "value": 3}],
                "finalMeasurement": {"stepCount": "100", "elapsedDuration": "60s",
                                     "metrics": [{"metricId": "acc", "value": 0.99}]}}],
}


def test_valid_tuning_job_and_pipeline_have_no_errors() -> None:
    assert conformance_errors(VALID_TUNING_JOB, TUNING_JOB) == []
    pipeline = {"displayName": "p", "state": "PIPELINE_STATE_SUCCEEDED", "trainingTaskDefinition": "gs://x.yaml",
                "trainingTaskInputs": VALID_JOB["jobSpec"], "trainingTaskMetadata": {"backingCustomJob": "c"},
                "modelToUpload": {"name": "projects/p/locations/l/models/1", "versionId": "1",
                                  "versionAliases": ["default"], "containerSpec": {"imageUri": "i"}}}
    assert conformance_errors(pipeline, "GoogleCloudAiplatformV1TrainingPipeline") == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda j: j["trials"][0]["finalMeasurement"].update(stepCount=100), "trials[0].finalMeasurement.stepCount"),
    (lambda j: j["trials"][0].update(state="CANCELLED"), "trials[0].state"),
    (lambda j: j["studySpec"]["metrics"][0].update(goal="UP"), "studySpec.metrics[0].goal"),
    (lambda j: j.update(state="PIPELINE_STATE_SUCCEEDED"), "state"),
    (lambda j: j["studySpec"]["parameters"][0]["integerValueSpec"].update(minValue=1),
     "studySpec.parameters[0].integerValueSpec.minValue"),
])
def test_tuning_job_violations_are_reported(change: Callable[[dict], None], expected: str) -> None:
    job = copy.deepcopy(VALID_TUNING_JOB)
    change(job)
    errors = conformance_errors(job, TUNING_JOB)
    assert len(errors) == 1 and errors[0].startswith(expected + ":")
