"""Tuning jobs, training pipelines, models and Cloud Quotas at the wire, against the emulator.

Every 2xx body a test receives is checked against the aiplatform v1 discovery document
(QuotaInfo, which is not in it, against the Cloud Quotas v1 field list by hand).
"""

from __future__ import annotations

import pytest
import requests

from airflow_gpu_sched.vertex import catalog
from airflow_gpu_sched.vertex.client import AsyncVertexClient, PermissionDeniedError, RetryPolicy, VertexClient
from airflow_gpu_sched.vertex.job_type_models import HyperparameterTuningJob, QuotaInfo, quota_limit
from airflow_gpu_sched.vertex.enums import JobState, PipelineState, TrialState, as_job_state
from airflow_gpu_sched.vertex.models import CUSTOM_TASK_DEFINITION
from airflow_gpu_sched.vertex.rules import SpecError
from tests.conformance import conformance_errors
from tests.conftest import LOCATION, PROJECT

FAST_RETRY = RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0)
SCHEMA_OF = {
    "hyperparameterTuningJobs.create": "GoogleCloudAiplatformV1HyperparameterTuningJob",
    "hyperparameterTuningJobs.get": "GoogleCloudAiplatformV1HyperparameterTuningJob",
    "hyperparameterTuningJobs.list": "GoogleCloudAiplatformV1ListHyperparameterTuningJobsResponse",
    "hyperparameterTuningJobs.cancel": "GoogleProtobufEmpty",
    "hyperparameterTuningJobs.delete": "GoogleLongrunningOperation",
    "trainingPipelines.create": "GoogleCloudAiplatformV1TrainingPipeline",
    "trainingPipelines.get": "GoogleCloudAiplatformV1TrainingPipeline",
    "trainingPipelines.list": "GoogleCloudAiplatformV1ListTrainingPipelinesResponse",
    "trainingPipelines.cancel": "GoogleProtobufEmpty",
    "trainingPipelines.delete": "GoogleLongrunningOperation",
    "models.get": "GoogleCloudAiplatformV1Model",
    "models.list": "GoogleCloudAiplatformV1ListModelsResponse",
    "customJobs.get": "GoogleCloudAiplatformV1CustomJob",
}
# Cloud Quotas v1 QuotaInfo / DimensionsInfo / QuotaDetails fields (cloud.google.com reference).
QUOTA_INFO_FIELDS = {"name", "quotaId", "metric", "service", "isPrecise", "refreshInterval", "containerType",
                     "dimensions", "metricDisplayName", "quotaDisplayName", "metricUnit",
                     "quotaIncreaseEligibility", "isFixed", "dimensionsInfos", "isConcurrent",
                     "serviceRequestQuotaUri"}
DIMENSIONS_INFO_FIELDS = {"dimensions", "details", "applicableLocations"}
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
H100_PREEMPTIBLE = "custom_model_training_preemptible_nvidia_a100_gpus"


class Vertex:
    def __init__(self, url: str):
        self.url = url
        self.root = f"{url}/v1/"

    def call(self, rpc: str, method: str, path: str, expect: int = 200, **kw) -> dict:
        response = requests.request(method, self.root + path, timeout=10, **kw)
        body = response.json()
        assert response.status_code == expect, body
        if expect == 200 and rpc in SCHEMA_OF:
            assert conformance_errors(body, SCHEMA_OF[rpc]) == []
        elif expect != 200:
            assert set(body) == {"error"} and body["error"]["code"] == expect
        return body

    def create_tuning(self, body: dict, expect: int = 200) -> dict:
        return self.call("hyperparameterTuningJobs.create", "POST", f"{PARENT}/hyperparameterTuningJobs", expect,
                         json=body)

    def tuning(self, name: str) -> dict:
        return self.call("hyperparameterTuningJobs.get", "GET", name)

    def create_pipeline(self, body: dict, expect: int = 200) -> dict:
        return self.call("trainingPipelines.create", "POST", f"{PARENT}/trainingPipelines", expect, json=body)

    def pipeline(self, name: str) -> dict:
        return self.call("trainingPipelines.get", "GET", name)

    def model(self, name: str) -> dict:
        return self.call("models.get", "GET", name)

    def job(self, name: str) -> dict:
        return self.call("customJobs.get", "GET", name)


# Emulated time moves only when a test advances it (1 emulated second per ~12 real days). At speed
# 1 these tests were flaky under load: the tuning-waves test asserted QUEUED right after the
# create, and a busy machine let queueSeconds (1 s) pass first -- it was PENDING.
STILL = 1e-6


@pytest.fixture
def emulator(emulator):
    emulator.reset({"seed": 7, "speed": STILL})
    return emulator


@pytest.fixture
def vertex(emulator) -> Vertex:
    return Vertex(emulator.url)


def job_spec(strategy: str = "STANDARD", run_seconds: int = 60, exit_code: int | None = None) -> dict:
    env = [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]
    if exit_code is not None:
        env.append({"name": "EMULATOR_EXIT_CODE", "value": str(exit_code)})
    return {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
        "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/trainer:1", "args": ["--epochs=3"], "env": env}}],
        "scheduling": {"strategy": strategy}}


def tuning(max_trials: int = 4, parallel: int = 2, strategy: str = "STANDARD", max_failed: int | None = None,
           algorithm: str = "GRID_SEARCH", goal: str = "MAXIMIZE", name: str = "tune", **spec_kw) -> dict:
    body = {"displayName": name, "labels": {"team": "ml"}, "maxTrialCount": max_trials,
            "parallelTrialCount": parallel,
            "studySpec": {"algorithm": algorithm, "metrics": [{"metricId": "accuracy", "goal": goal}],
                          "parameters": [{"parameterId": "layers",
                                          "integerValueSpec": {"minValue": "5", "maxValue": "8"}}]},
            "trialJobSpec": job_spec(strategy, **spec_kw)}
    if max_failed is not None:
        body["maxFailedTrialCount"] = max_failed
    return body


def pipeline(strategy: str = "FLEX_START", name: str = "nightly", **extra) -> dict:
    inputs = {**job_spec(strategy), "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/run1"}}
    return {"displayName": name, "labels": {"team": "ml"}, "trainingTaskDefinition": CUSTOM_TASK_DEFINITION,
            "trainingTaskInputs": inputs,
            "modelToUpload": {"displayName": "ranker", "containerSpec": {"imageUri": "gcr.io/p/serve:1"}}, **extra}


def expected_accuracy(layers: int) -> float:
    """docs/emulator.md: position in [5, 8] is (v - 5) / 3; MAXIMIZE reports 1 - (position - 0.7)^2."""
    return 1 - ((layers - 5) / 3 - 0.7) ** 2


def active_intervals(emulator, tuning_name: str) -> list[tuple[str, str]]:
    """(created, ended) emulated times of each trial's custom job, from the emulator's records."""
    spans = []
    for trial in emulator.history(tuning_name)["trials"]:
        history = emulator.history(trial["customJob"])["history"]
        ends = [h["time"] for h in history if h["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
                                                              "JOB_STATE_CANCELLED")]
        spans.append((history[0]["time"], ends[-1] if ends else "9999"))
    return spans


def max_overlap(spans: list[tuple[str, str]]) -> int:
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    active = peak = 0
    for _, delta in events:
        active += delta
        peak = max(peak, active)
    return peak


# ---------------------------------------------------------------------------- tuning jobs


def test_tuning_job_runs_all_trials_in_parallel_waves_and_the_best_is_predictable(vertex, emulator):
    created = vertex.create_tuning(tuning(max_trials=4, parallel=2))
    name = created["name"]
    assert name.startswith(f"{PARENT}/hyperparameterTuningJobs/") and created["state"] == "JOB_STATE_PENDING"
    assert "trials" not in created  # recorded: no trials in the create answer, nor while QUEUED
    queued = vertex.tuning(name)
    assert queued["state"] == "JOB_STATE_QUEUED" and "trials" not in queued
    emulator.advance(1)  # queueSeconds: admitted, PENDING again (recorded: PENDING -> QUEUED -> PENDING)
    admitted = vertex.tuning(name)
    assert admitted["state"] == "JOB_STATE_PENDING"
    assert [t["id"] for t in admitted["trials"]] == ["1", "2"]  # two trials started at once
    first_job = vertex.job(admitted["trials"][0]["customJob"])
    assert first_job["displayName"] == "tune-trial-1" and first_job["labels"] == {"team": "ml"}
    assert first_job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == ["--epochs=3", "--layers=5"]
    emulator.advance(40)  # queued 1 s, provisioning 30 s: the first wave runs
    assert vertex.tuning(name)["state"] == "JOB_STATE_RUNNING"
    emulator.advance(400)
    done = vertex.tuning(name)
    assert done["state"] == "JOB_STATE_SUCCEEDED" and done["endTime"] >= done["startTime"]
    assert [t["state"] for t in done["trials"]] == ["SUCCEEDED"] * 4
    assert [t["parameters"][0]["value"] for t in done["trials"]] == [5, 6, 7, 8]  # the grid, in order
    for trial in done["trials"]:
        value = trial["finalMeasurement"]["metrics"][0]["value"]
        assert value == pytest.approx(expected_accuracy(trial["parameters"][0]["value"]))
    best = HyperparameterTuningJob.model_validate(done).best_trial()
    assert best.id == "3" and best.parameter_values == {"layers": 7}
    spans = active_intervals(emulator, name)
    assert len(spans) == 4 and max_overlap(spans) == 2  # never more than parallelTrialCount at once


def test_minimize_random_search_is_seeded_and_best_is_the_smallest(vertex, emulator):
    body = tuning(max_trials=3, parallel=3, algorithm="RANDOM_SEARCH", goal="MINIMIZE")
    body["studySpec"]["parameters"] = [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0}}]
    name = vertex.create_tuning(body)["name"]
    emulator.advance(200)
    done = HyperparameterTuningJob.model_validate(vertex.tuning(name))
    values = {t.id: t.parameter_values["lr"] for t in done.trials}
    losses = {t.id: t.final_measurement.value_of("accuracy") for t in done.trials}
    assert losses == {k: pytest.approx((v - 0.7) ** 2) for k, v in values.items()}
    assert done.best_trial().id == min(losses, key=losses.get)
    emulator.reset({"seed": 7, "speed": STILL})  # same seed, same creation order: the same suggestions
    again = vertex.create_tuning(body)
    assert again["name"] == name
    emulator.advance(1)  # the trials start once the tuning job leaves QUEUED
    again = vertex.tuning(name)
    assert [t["parameters"][0]["value"] for t in again["trials"]] == [values[i] for i in ("1", "2", "3")]


def test_spot_tuning_job_whose_trial_is_preempted_still_succeeds(vertex, emulator):
    name = vertex.create_tuning(tuning(max_trials=2, parallel=2, strategy="SPOT", run_seconds=100))["name"]
    emulator.advance(60)
    trial_job = vertex.tuning(name)["trials"][0]["customJob"]
    assert vertex.job(trial_job)["state"] == "JOB_STATE_RUNNING"
    emulator.preempt(trial_job)
    assert vertex.tuning(name)["state"] == "JOB_STATE_RUNNING"
    emulator.advance(300)
    done = vertex.tuning(name)
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in done["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert emulator.history(trial_job)["restarts"] == 1


def test_a_trial_that_stocks_out_fails_the_tuning_job_with_stockout(vertex, emulator):
    emulator.reset({"seed": 7, "speed": STILL, "maxServiceRestarts": 1})
    name = vertex.create_tuning(tuning(max_trials=3, parallel=2, strategy="SPOT", max_failed=1,
                                       run_seconds=600))["name"]
    emulator.advance(40)
    trials = vertex.tuning(name)["trials"]
    emulator.preempt(trials[0]["customJob"])
    emulator.advance(40)
    emulator.preempt(trials[0]["customJob"])  # the second preemption, after one restart: STOCKOUT
    failed = vertex.tuning(name)
    assert failed["state"] == "JOB_STATE_FAILED"
    assert failed["error"]["code"] == 8 and failed["error"]["message"].startswith("The job was preempted 2 times")
    assert failed["error"]["details"][0]["reason"] == "STOCKOUT"
    assert failed["trials"][0]["state"] == "INFEASIBLE" and "STOCKOUT" in failed["trials"][0]["infeasibleReason"]
    assert failed["trials"][1]["state"] == "STOPPING"  # the other trial is cancelled
    assert len(failed["trials"]) == 2  # no third trial after the failure
    emulator.advance(5)
    assert vertex.job(failed["trials"][1]["customJob"])["state"] == "JOB_STATE_CANCELLED"


def test_with_max_failed_zero_a_failed_trial_is_tolerated_while_others_succeed(vertex, emulator):
    body = tuning(max_trials=2, parallel=1)
    name = vertex.create_tuning(body)["name"]
    emulator.advance(5)
    first = vertex.tuning(name)["trials"][0]["customJob"]
    requests.post(f"{vertex.root}{first}:cancel", json={}, timeout=10)  # someone cancels trial 1's job
    emulator.advance(200)
    done = vertex.tuning(name)
    assert [t["state"] for t in done["trials"]] == ["INFEASIBLE", "SUCCEEDED"]
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    assert emulator.history(name)["failedTrials"] == 1


def test_flex_start_trial_wait_expiry_fails_the_tuning_job_with_that_reason(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    body = tuning(max_trials=2, parallel=1, strategy="FLEX_START")
    body["trialJobSpec"]["scheduling"]["maxWaitDuration"] = "600s"
    name = vertex.create_tuning(body)["name"]
    emulator.advance(700)
    assert vertex.tuning(name)["state"] == "JOB_STATE_PENDING"  # trial 1 expired, trial 2 waits
    emulator.advance(700)
    failed = vertex.tuning(name)
    assert failed["state"] == "JOB_STATE_FAILED" and failed["error"]["code"] == 4
    assert failed["error"]["details"][0]["reason"] == "FLEX_START_WAIT_EXPIRED"
    assert [t["state"] for t in failed["trials"]] == ["INFEASIBLE", "INFEASIBLE"]


def test_tuning_trials_run_on_a_persistent_resource(vertex, emulator):
    from tests.conftest import with_a100_pool

    emulator.reset({**with_a100_pool(replicas=1), "speed": STILL})
    body = tuning(max_trials=2, parallel=2)
    body["trialJobSpec"]["persistentResourceId"] = "pool-a"
    body["trialJobSpec"].pop("scheduling")
    name = vertex.create_tuning(body)["name"]
    emulator.advance(200)
    done = vertex.tuning(name)
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    runs = []
    for trial in done["trials"]:
        history = emulator.history(trial["customJob"])["history"]
        runs.append(([h["time"] for h in history if h["state"] == "JOB_STATE_RUNNING"][0],
                     [h["time"] for h in history if h["state"] == "JOB_STATE_SUCCEEDED"][0]))
    runs.sort()
    assert runs[1][0] >= runs[0][1]  # one replica in the pool: the second trial ran after the first
    assert emulator.stats()["jobsCreated"] == {"PERSISTENT_RESOURCE": 2}
    body["trialJobSpec"]["persistentResourceId"] = "pool-b"
    assert vertex.create_tuning(body, expect=400)["error"]["status"] == "FAILED_PRECONDITION"


def test_every_trial_failing_fails_the_job_with_the_trials_error(vertex, emulator):
    name = vertex.create_tuning(tuning(max_trials=2, parallel=2, exit_code=3))["name"]
    emulator.advance(200)
    failed = vertex.tuning(name)
    assert failed["state"] == "JOB_STATE_FAILED" and failed["error"]["code"] == 3
    assert "non-zero status of 3" in failed["error"]["message"]


def test_cancel_tuning_job_cancels_its_trials(vertex, emulator):
    name = vertex.create_tuning(tuning(max_trials=4, parallel=2))["name"]
    emulator.advance(40)
    vertex.call("hyperparameterTuningJobs.cancel", "POST", f"{name}:cancel", json={})
    assert vertex.tuning(name)["state"] == "JOB_STATE_CANCELLING"
    vertex.call("hyperparameterTuningJobs.delete", "DELETE", name, expect=400)  # not finished yet
    emulator.advance(5)
    cancelled = vertex.tuning(name)
    assert cancelled["state"] == "JOB_STATE_CANCELLED" and cancelled["error"]["code"] == 1
    assert len(cancelled["trials"]) == 2
    assert {vertex.job(t["customJob"])["state"] for t in cancelled["trials"]} == {"JOB_STATE_CANCELLED"}
    vertex.call("hyperparameterTuningJobs.cancel", "POST", f"{name}:cancel", expect=400, json={})
    assert vertex.call("hyperparameterTuningJobs.delete", "DELETE", name)["done"] is True
    vertex.call("hyperparameterTuningJobs.get", "GET", name, expect=404)


def test_tuning_job_quota_is_decided_per_trial(vertex, emulator):
    emulator.set_quota_limit(H100_PREEMPTIBLE, 2, region=LOCATION)
    big = tuning(parallel=1, strategy="SPOT")
    big["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineType="a2-highgpu-4g", acceleratorCount=4)
    error = vertex.create_tuning(big, expect=429)["error"]  # one trial alone needs 4 > 2: refused at create
    assert error["message"] == ("The following quota metrics exceed quota limits: "
                                f"aiplatform.googleapis.com/{H100_PREEMPTIBLE}")
    assert emulator.stats()["jobsCreated"] == {}
    name = vertex.create_tuning(tuning(max_trials=3, parallel=3, strategy="SPOT", run_seconds=100))["name"]
    emulator.advance(50)
    trials = vertex.tuning(name)["trials"]
    states = sorted(vertex.job(t["customJob"])["state"] for t in trials)
    assert states == ["JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_RUNNING"]  # the third waits for quota
    emulator.advance(400)
    assert vertex.tuning(name)["state"] == "JOB_STATE_SUCCEEDED"


@pytest.mark.parametrize(("change", "field"), [
    (lambda b: b.update(parallelTrialCount=5), "parallelTrialCount"),
    (lambda b: b.update(maxTrialCount=0), "maxTrialCount"),
    (lambda b: b["studySpec"].update(metrics=[]), "studySpec.metrics"),
    (lambda b: b["studySpec"]["metrics"][0].update(goal="GOAL_TYPE_UNSPECIFIED"), "studySpec.metrics[0].goal"),
    (lambda b: b["studySpec"].update(parameters=[]), "studySpec.parameters"),
    (lambda b: b["trialJobSpec"]["scheduling"].update(strategy="FLEX_START")
     or b["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(
         machineType="n1-standard-8", acceleratorType="NVIDIA_TESLA_T4"),
     "trialJobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"),
])
def test_bad_tuning_jobs_are_rejected_naming_the_field(vertex, emulator, change, field):
    body = tuning()
    change(body)
    error = vertex.create_tuning(body, expect=400)["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert field in [v["field"] for v in error["details"][0]["fieldViolations"]]
    with pytest.raises(SpecError) as raised:  # the client rejects it before the wire, with the same rule
        VertexClient(LOCATION, PROJECT, api_endpoint=emulator.url).create_hyperparameter_tuning_job(body)
    assert field in [v.path for v in raised.value.violations]
    assert emulator.stats()["requests"] == {"hyperparameterTuningJobs.create": 1}


# ---------------------------------------------------------------------------- training pipelines


def test_pipeline_runs_its_job_then_registers_a_model_and_a_parent_model_gets_version_2(vertex, emulator):
    created = vertex.create_pipeline(pipeline())
    name, backing = created["name"], created["trainingTaskMetadata"]["backingCustomJob"]
    assert created["state"] == "PIPELINE_STATE_PENDING" and backing.startswith(f"{PARENT}/customJobs/")
    assert vertex.job(backing)["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"
    emulator.advance(40)
    assert vertex.pipeline(name)["state"] == "PIPELINE_STATE_RUNNING"
    emulator.advance(60)
    done = vertex.pipeline(name)
    assert done["state"] == "PIPELINE_STATE_SUCCEEDED" and "error" not in done
    model = done["modelToUpload"]
    assert model["name"].startswith(f"{PARENT}/models/") and model["versionId"] == "1"
    assert model["artifactUri"] == "gs://bucket/run1/model" and model["trainingPipeline"] == name
    assert vertex.model(model["name"])["displayName"] == "ranker"

    second = vertex.create_pipeline(pipeline(parentModel=model["name"]))
    emulator.advance(200)
    v2 = vertex.pipeline(second["name"])["modelToUpload"]
    assert v2["name"] == model["name"] and v2["versionId"] == "2"
    assert vertex.model(model["name"])["versionId"] == "2"  # the newest version is the default
    v1 = vertex.model(model["name"] + "@1")
    assert v1["versionId"] == "1" and "default" not in v1.get("versionAliases", [])
    assert vertex.model(model["name"] + "@default")["versionId"] == "2"
    listed = vertex.call("models.list", "GET", f"{PARENT}/models")["models"]
    assert [(m["name"], m["versionId"]) for m in listed] == [(model["name"], "2")]
    vertex.call("models.get", "GET", model["name"] + "@3", expect=404)


def test_pipeline_with_model_id_names_the_model_and_refuses_a_second_upload_under_it(vertex, emulator):
    vertex.create_pipeline(pipeline(modelId="ranker-v"))
    emulator.advance(200)
    assert vertex.model(f"{PARENT}/models/ranker-v")["versionId"] == "1"
    error = vertex.create_pipeline(pipeline(modelId="ranker-v"), expect=409)["error"]
    assert "parentModel" in error["message"]


def test_pipeline_fails_with_its_jobs_error_and_registers_nothing(vertex, emulator):
    body = pipeline()
    body["trainingTaskInputs"]["workerPoolSpecs"][0]["containerSpec"]["env"].append(
        {"name": "EMULATOR_EXIT_CODE", "value": "2"})
    name = vertex.create_pipeline(body)["name"]
    emulator.advance(200)
    failed = vertex.pipeline(name)
    assert failed["state"] == "PIPELINE_STATE_FAILED" and failed["error"]["code"] == 3
    assert "name" not in failed["modelToUpload"]
    assert vertex.call("models.list", "GET", f"{PARENT}/models") == {}


def test_pipeline_cancel_cancels_its_job(vertex, emulator):
    created = vertex.create_pipeline(pipeline())
    emulator.advance(40)
    vertex.call("trainingPipelines.cancel", "POST", f"{created['name']}:cancel", json={})
    assert vertex.pipeline(created["name"])["state"] == "PIPELINE_STATE_CANCELLING"
    emulator.advance(5)
    cancelled = vertex.pipeline(created["name"])
    assert cancelled["state"] == "PIPELINE_STATE_CANCELLED" and cancelled["error"]["code"] == 1
    assert vertex.job(created["trainingTaskMetadata"]["backingCustomJob"])["state"] == "JOB_STATE_CANCELLED"
    assert vertex.call("trainingPipelines.delete", "DELETE", created["name"])["done"] is True


@pytest.mark.parametrize(("change", "field"), [
    (lambda b: b.update(trainingTaskDefinition="gs://google-cloud-aiplatform/schema/trainingjob/definition/"
                                               "automl_tabular_1.0.0.yaml"), "trainingTaskDefinition"),
    (lambda b: b["modelToUpload"].pop("containerSpec"), "modelToUpload.containerSpec.imageUri"),
    (lambda b: b["modelToUpload"].pop("displayName"), "modelToUpload.displayName"),
    (lambda b: b["trainingTaskInputs"]["workerPoolSpecs"][0].update(replicaCount="2"),
     "trainingTaskInputs.workerPoolSpecs[0].replicaCount"),
    (lambda b: b.update(parentModel="models/7"), "parentModel"),
])
def test_bad_pipelines_are_rejected_naming_the_field(vertex, emulator, change, field):
    body = pipeline()
    change(body)
    error = vertex.create_pipeline(body, expect=400)["error"]
    assert field in [v["field"] for v in error["details"][0]["fieldViolations"]]
    with pytest.raises(SpecError) as raised:
        VertexClient(LOCATION, PROJECT, api_endpoint=emulator.url).create_training_pipeline(body)
    assert field in [v.path for v in raised.value.violations]


def test_parent_model_must_exist(vertex):
    error = vertex.create_pipeline(pipeline(parentModel=f"{PARENT}/models/404"), expect=400)["error"]
    assert error["status"] == "FAILED_PRECONDITION" and error["details"][0]["fieldViolations"][0]["field"] == "parentModel"


# ---------------------------------------------------------------------------- lists


def test_lists_filter_and_page_tuning_jobs_and_pipelines(vertex, emulator):
    for i in range(3):
        vertex.create_tuning({**tuning(max_trials=1, parallel=1, name=f"tune-{i}"), "labels": {"n": str(i)}})
        vertex.create_pipeline({**pipeline(name=f"pipe-{i}"), "labels": {"n": str(i)}})
    path = f"{PARENT}/hyperparameterTuningJobs"
    first = vertex.call("hyperparameterTuningJobs.list", "GET", path, params={"pageSize": 2})
    assert [j["displayName"] for j in first["hyperparameterTuningJobs"]] == ["tune-2", "tune-1"]
    assert all("trials" not in j for j in first["hyperparameterTuningJobs"])  # lists carry no trials
    rest = vertex.call("hyperparameterTuningJobs.list", "GET", path,
                       params={"pageSize": 2, "pageToken": first["nextPageToken"]})
    assert [j["displayName"] for j in rest["hyperparameterTuningJobs"]] == ["tune-0"] and "nextPageToken" not in rest
    picked = vertex.call("hyperparameterTuningJobs.list", "GET", path,
                         params={"filter": 'labels.n="1" AND state="JOB_STATE_QUEUED"'})
    assert [j["displayName"] for j in picked["hyperparameterTuningJobs"]] == ["tune-1"]
    pipes = vertex.call("trainingPipelines.list", "GET", f"{PARENT}/trainingPipelines",
                        params={"filter": 'display_name:"pipe-*" AND NOT labels.n="0"'})
    assert [p["displayName"] for p in pipes["trainingPipelines"]] == ["pipe-2", "pipe-1"]
    emulator.advance(200)
    done = vertex.call("trainingPipelines.list", "GET", f"{PARENT}/trainingPipelines",
                       params={"filter": 'state="PIPELINE_STATE_SUCCEEDED"', "pageSize": 1})
    assert len(done["trainingPipelines"]) == 1 and done["nextPageToken"]
    vertex.call("trainingPipelines.list", "GET", f"{PARENT}/trainingPipelines", expect=400,
                params={"filter": "colour=red"})


def test_clients_round_trip_both_resources(emulator):
    with VertexClient(LOCATION, PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY) as client:
        job = client.create_hyperparameter_tuning_job(tuning(max_trials=2, parallel=1))
        pipe = client.create_training_pipeline(pipeline())
        assert job.state is JobState.JOB_STATE_PENDING and pipe.state is PipelineState.PIPELINE_STATE_PENDING
        assert pipe.job_state is JobState.JOB_STATE_PENDING
        emulator.advance(400)
        job = client.get_hyperparameter_tuning_job(job.job_id)  # a bare id expands to our parent
        pipe = client.get_training_pipeline(pipe.name)
        assert job.state is JobState.JOB_STATE_SUCCEEDED and [t.state for t in job.trials] == [TrialState.SUCCEEDED] * 2
        assert pipe.state.as_job_state() is JobState.JOB_STATE_SUCCEEDED and pipe.is_terminal()
        model = client.get_model(pipe.model_to_upload.versioned_name)
        assert model.version_id == "1" and model.model_id == pipe.model_to_upload.model_id
        assert [m.name for m in client.list_models()] == [model.name]
        assert [j.name for j in client.list_hyperparameter_tuning_jobs(filter='labels.team="ml"', page_size=1)] == [job.name]
        assert [p.name for p in client.list_training_pipelines(page_size=1)] == [pipe.name]
        assert client.delete_training_pipeline(pipe.name).done is True


async def test_async_client_tuning_and_pipeline(emulator):
    client = AsyncVertexClient(LOCATION, PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY)
    job = await client.create_hyperparameter_tuning_job(tuning(max_trials=1, parallel=1))
    pipe = await client.create_training_pipeline(pipeline())
    await client.cancel_training_pipeline(pipe.name)
    await client.cancel_hyperparameter_tuning_job(job.name)
    assert (await client.get_training_pipeline(pipe.name)).state is PipelineState.PIPELINE_STATE_CANCELLING
    emulator.advance(5)
    assert (await client.get_hyperparameter_tuning_job(job.name)).state is JobState.JOB_STATE_CANCELLED
    assert [p.name async for p in client.list_training_pipelines()] == [pipe.name]
    assert [j.name async for j in client.list_hyperparameter_tuning_jobs()] == [job.name]


# ---------------------------------------------------------------------------- Cloud Quotas


def _quota_infos_raw(url: str, **params) -> requests.Response:
    return requests.get(f"{url}/v1/projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com/quotaInfos",
                        params=params, timeout=10)


def test_quota_infos_list_the_limits_set_per_region_with_a_default(emulator):
    emulator.set_quota_limit("custom_model_training_preemptible_nvidia_h100_gpus", 8, region="us-east4")
    emulator.set_quota_limit("aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus", 16)  # all regions
    raw = _quota_infos_raw(emulator.url).json()
    for info in raw["quotaInfos"]:
        assert set(info) <= QUOTA_INFO_FIELDS and info["service"] == "aiplatform.googleapis.com"
        assert info["dimensions"] == ["region"]
        for dims in info["dimensionsInfos"]:
            assert set(dims) <= DIMENSIONS_INFO_FIELDS and isinstance(dims["details"]["value"], str)
    infos = [QuotaInfo.model_validate(q) for q in raw["quotaInfos"]]
    h100 = catalog.quota_metric("NVIDIA_H100_80GB", "FLEX_START")
    assert h100 == "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus"
    assert quota_limit(infos, h100, "us-east4") == 8
    assert quota_limit(infos, h100, "us-central1") == 64  # never set: the generous default
    assert quota_limit(infos, catalog.quota_metric("NVIDIA_H100_80GB", "STANDARD"), "europe-west4") == 16
    assert quota_limit(infos, "custom_model_training_nvidia_h100_gpus", "us-east4") == 16
    with VertexClient(LOCATION, PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY) as client:
        assert [q.name for q in client.list_quota_infos()] == [q.name for q in infos]


@pytest.mark.parametrize("running, waiting_state", [("job_created", "PIPELINE_STATE_RUNNING"),
                                                    ("job_running", "PIPELINE_STATE_PENDING")])
def test_scenario_quotas_are_served_and_enforced(vertex, emulator, running, waiting_state):
    # issue 40: a pipeline is RUNNING as soon as its job exists, the job still waiting (observed);
    # the old expectation (PENDING until its job runs) is the variant pipelineRunning: job_running
    emulator.reset({"seed": 7, "speed": STILL, "defaultGpuQuota": 32, "variants": {"pipelineRunning": running},
                    "quotas": [{"metric": H100_PREEMPTIBLE, "region": LOCATION, "limit": 1}]})
    infos = [QuotaInfo.model_validate(q) for q in _quota_infos_raw(emulator.url).json()["quotaInfos"]]
    assert quota_limit(infos, H100_PREEMPTIBLE, LOCATION) == 1
    assert quota_limit(infos, H100_PREEMPTIBLE, "us-east4") == 32
    first = vertex.create_pipeline(pipeline("SPOT"))["name"]  # 1 GPU: fits
    emulator.advance(2)
    second = vertex.create_pipeline(pipeline("FLEX_START"))["name"]  # fits alone: accepted, waits for quota
    emulator.advance(40)
    assert vertex.pipeline(first)["state"] == "PIPELINE_STATE_RUNNING"
    waiting = vertex.pipeline(second)
    assert waiting["state"] == waiting_state
    assert vertex.job(waiting["trainingTaskMetadata"]["backingCustomJob"])["state"] == "JOB_STATE_QUEUED"


def test_a_pipeline_over_its_quota_is_created_then_fails_with_code_8(vertex, emulator):
    emulator.set_quota_limit(H100_PREEMPTIBLE, 0, region=LOCATION)
    created = vertex.create_pipeline(pipeline("SPOT"))  # never a 429 for GPU quota
    assert created["state"] == "PIPELINE_STATE_PENDING" and "trainingTaskMetadata" not in created
    emulator.advance(5)
    failed = vertex.pipeline(created["name"])
    assert failed["state"] == "PIPELINE_STATE_FAILED" and "endTime" in failed
    assert failed["error"] == {"code": 8, "message": "The following quota metrics exceed quota limits: "
                                                     f"aiplatform.googleapis.com/{H100_PREEMPTIBLE}"}
    assert emulator.stats()["jobsCreated"] == {}  # its custom job was never made
    cancelled = vertex.create_pipeline(pipeline("SPOT", name="other"))["name"]
    vertex.call("trainingPipelines.cancel", "POST", f"{cancelled}:cancel", json={})
    assert vertex.pipeline(cancelled)["state"] == "PIPELINE_STATE_CANCELLED"


def test_quota_infos_page(emulator):
    first = _quota_infos_raw(emulator.url, pageSize=5).json()
    assert len(first["quotaInfos"]) == 5
    second = _quota_infos_raw(emulator.url, pageSize=5, pageToken=first["nextPageToken"]).json()
    assert {q["metric"] for q in first["quotaInfos"]}.isdisjoint(q["metric"] for q in second["quotaInfos"])


def test_old_quota_endpoint_and_quotas_share_one_store(vertex, emulator):
    emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", preemptible=1)
    infos = [QuotaInfo.model_validate(q) for q in _quota_infos_raw(emulator.url).json()["quotaInfos"]]
    assert quota_limit(infos, H100_PREEMPTIBLE, LOCATION) == 1
    emulator.set_quota_limit(H100_PREEMPTIBLE, 0, region=LOCATION)  # the new endpoint lowers what create enforces
    error = vertex.create_tuning(tuning(max_trials=1, parallel=1, strategy="SPOT"), expect=429)["error"]
    assert H100_PREEMPTIBLE in error["message"]
    assert emulator.quotas()["quotas"] == [{"metric": f"aiplatform.googleapis.com/{H100_PREEMPTIBLE}",
                                            "region": LOCATION, "limit": 0}]


async def test_denied_quota_reads_raise_permission_denied_in_both_clients(emulator):
    emulator.deny_quota_reads()
    response = _quota_infos_raw(emulator.url)
    assert response.status_code == 403 and response.json()["error"]["status"] == "PERMISSION_DENIED"
    with VertexClient(LOCATION, PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY) as client:
        with pytest.raises(PermissionDeniedError) as raised:
            client.list_quota_infos()
    assert raised.value.status_code == 403 and raised.value.request.rpc == "quotaInfos.list"
    with pytest.raises(PermissionDeniedError):
        await AsyncVertexClient(LOCATION, PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY).list_quota_infos()
    assert emulator.stats()["requests"]["quotaInfos.list"] == 3  # a 403 is not retried
    emulator.deny_quota_reads(False)
    assert _quota_infos_raw(emulator.url).status_code == 200


# ---------------------------------------------------------------------------- models and helpers


def test_pipeline_states_map_to_job_states():
    assert PipelineState.PIPELINE_STATE_CANCELLING.as_job_state() is JobState.JOB_STATE_CANCELLING
    assert as_job_state("PIPELINE_STATE_SUCCEEDED") is JobState.JOB_STATE_SUCCEEDED
    assert as_job_state(JobState.JOB_STATE_QUEUED) is JobState.JOB_STATE_QUEUED
    assert PipelineState(5).is_terminal() and not PipelineState.PIPELINE_STATE_PAUSED.is_terminal()
    for state in PipelineState:
        assert state.is_terminal() == state.as_job_state().is_terminal()


def test_quota_limit_prefers_the_region_then_the_default():
    info = QuotaInfo.model_validate({"metric": "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus",
                                     "dimensionsInfos": [{"dimensions": {"region": "us-east4"}, "details": {"value": "4"}},
                                                         {"dimensions": {}, "details": {"value": "12"}}]})
    assert quota_limit([info], "custom_model_training_nvidia_l4_gpus", "us-east4") == 4
    assert quota_limit([info], "custom_model_training_nvidia_l4_gpus", "asia-east1") == 12
    assert quota_limit([info], "custom_model_training_nvidia_t4_gpus", "us-east4") is None


def test_quota_metric_names_per_strategy():
    assert catalog.quota_metric("NVIDIA_L4", "SPOT", full=False) == "custom_model_training_preemptible_nvidia_l4_gpus"
    assert catalog.quota_metric("NVIDIA_A100_80GB", "STANDARD", full=False) == "custom_model_training_nvidia_a100_80gb_gpus"
    assert catalog.quota_metric("NVIDIA_A100_80GB", None, full=False) == "custom_model_training_nvidia_a100_80gb_gpus"
    assert catalog.quota_metric("TPU_V3", "STANDARD") is None
    assert catalog.accelerator_of_metric("custom_model_training_preemptible_nvidia_h100_gpus") == (
        catalog.A.NVIDIA_H100_80GB, True)



def test_operator_argument_rules_name_the_arguments():
    from airflow_gpu_sched.vertex.job_type_rules import check_pipeline_options, check_tuning_options

    study = {"metrics": [{"metricId": "acc", "goal": "UP"}], "parameters": [{"parameterId": "n"}]}
    paths = [v.path for v in check_tuning_options(study, 2, 3, None)]
    assert paths == ["parallel_trial_count", "study_spec.metrics[0].goal", "study_spec.parameters[0]"]
    assert check_tuning_options({**study, "metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
                                 "parameters": [{"parameterId": "n", "discreteValueSpec": {"values": [1, 2]}}]},
                                2, None) == []
    assert [v.path for v in check_tuning_options(None, 0, 1)] == ["max_trial_count", "study_spec"]
    assert [v.path for v in check_pipeline_options("", None, "models/1")] == [
        "model_display_name", "model_serving_image_uri", "parent_model"]
    assert check_pipeline_options("m", "img", f"{PARENT}/models/1") == []


def test_gpu_quota_metric_flag_form():
    assert catalog.gpu_quota_metric("NVIDIA_H100_80GB", preemptible=True) == \
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus"
    assert catalog.gpu_quota_metric(catalog.A.NVIDIA_TESLA_A100, preemptible=False) == \
        catalog.quota_metric("NVIDIA_TESLA_A100", "STANDARD")


# ---------------------------------------------------------------------------- issue 40: when an owner says RUNNING


def test_a_tuning_job_is_running_when_its_first_trial_is_created_under_trial_created(vertex, emulator):
    emulator.reset({"seed": 7, "speed": STILL, "variants": {"tuningRunning": "trial_created"}})
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0)  # no trial's job can run
    name = vertex.create_tuning(tuning(max_trials=2, parallel=1))["name"]
    emulator.advance(40)
    running = vertex.tuning(name)
    assert running["state"] == "JOB_STATE_RUNNING" and [t["id"] for t in running["trials"]] == ["1"]
    assert vertex.job(running["trials"][0]["customJob"])["state"] == "JOB_STATE_QUEUED"
    vertex.call("hyperparameterTuningJobs.cancel", "POST", f"{name}:cancel", json={})
    emulator.advance(5)
    assert vertex.tuning(name)["state"] == "JOB_STATE_CANCELLED"  # no trial ran: CANCELLED, whatever cancelOutcome


def test_a_pipeline_answers_pending_with_its_backing_job_then_runs_while_the_job_waits(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    created = vertex.create_pipeline(pipeline("FLEX_START"))
    job = created["trainingTaskMetadata"]["backingCustomJob"]  # named in the create's answer (Google's example)
    assert created["state"] == "PIPELINE_STATE_PENDING"
    emulator.advance(2)  # queueSeconds
    assert vertex.pipeline(created["name"])["state"] == "PIPELINE_STATE_RUNNING"
    assert vertex.job(job)["state"] == "JOB_STATE_QUEUED"  # observed: the job still has no GPUs


@pytest.mark.parametrize("state", ["JOB_STATE_PAUSED", "JOB_STATE_UPDATING", "JOB_STATE_HIBERNATING"])
def test_set_state_holds_a_job_in_a_state_until_it_is_cancelled(vertex, emulator, state):
    created = vertex.call("customJobs.create", "POST", f"{PARENT}/customJobs", json={
        "displayName": "held", "jobSpec": job_spec()})
    held = emulator.set_resource_state(created["name"], state)
    assert held["state"] == state
    emulator.advance(3600)  # nothing moves it on (read raw: Google's schema has no state it does not know)
    assert requests.get(f"{emulator.url}/v1/{created['name']}", timeout=5).json()["state"] == state
    vertex.call("customJobs.cancel", "POST", f"{created['name']}:cancel", json={})
    emulator.advance(5)
    assert vertex.job(created["name"])["state"] == "JOB_STATE_CANCELLED"


@pytest.mark.parametrize("state", ["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED", "PAUSED", ""])
def test_set_state_refuses_the_emulators_own_and_terminal_states(vertex, emulator, state):
    created = vertex.call("customJobs.create", "POST", f"{PARENT}/customJobs", json={
        "displayName": "held", "jobSpec": job_spec()})
    with pytest.raises(RuntimeError, match="400"):
        emulator.set_resource_state(created["name"], state)
