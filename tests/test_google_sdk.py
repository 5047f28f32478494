"""Google's own SDK as a client of the emulator (test extra only, never at run time).

google-cloud-aiplatform's GAPIC clients (REST transport, anonymous credentials, ``api_endpoint``
= the emulator's http:// URL) drive every resource type the emulator serves, and
google-cloud-quotas' CloudQuotasClient reads its quotas. These clients send what real users'
code sends: enums as numbers (``$alt=json;enum-encoding=int``), int64 as strings, ``{}`` cancel
bodies, and they poll operations at ``/ui/{operation name}``; they parse every answer into
Google's proto types, so a response the emulator shapes wrongly fails here too.
"""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1 as v1
from google.cloud import cloudquotas_v1
from google.protobuf import json_format, struct_pb2

from airflow_gpu_sched.vertex.models import CUSTOM_TASK_DEFINITION
from tests.conftest import LOCATION, PROJECT

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
A100 = v1.MachineSpec(machine_type="a2-highgpu-1g", accelerator_type=v1.AcceleratorType.NVIDIA_TESLA_A100,
                      accelerator_count=1)


def options(emulator) -> dict:
    # the REST transports keep an explicit http:// scheme (url_scheme applies only without one)
    return {"transport": "rest", "credentials": AnonymousCredentials(),
            "client_options": {"api_endpoint": emulator.url}}


@pytest.fixture
def jobs(emulator) -> v1.JobServiceClient:
    return v1.JobServiceClient(**options(emulator))


@pytest.fixture
def pipelines(emulator) -> v1.PipelineServiceClient:
    return v1.PipelineServiceClient(**options(emulator))


def job_spec(strategy: v1.Scheduling.Strategy = v1.Scheduling.Strategy.STANDARD, run_seconds: int = 60,
             **spec) -> v1.CustomJobSpec:
    env = [v1.EnvVar(name="EMULATOR_RUN_SECONDS", value=str(run_seconds))]
    pool = v1.WorkerPoolSpec(machine_spec=A100, replica_count=1,
                             container_spec=v1.ContainerSpec(image_uri="gcr.io/p/trainer:1", env=env))
    return v1.CustomJobSpec(worker_pool_specs=[pool], scheduling=v1.Scheduling(strategy=strategy), **spec)


def test_custom_job_life_cycle_through_the_sdk(jobs, emulator):
    spec = job_spec(v1.Scheduling.Strategy.FLEX_START, run_seconds=100)
    spec.scheduling.max_wait_duration = {"seconds": 1800}
    created = jobs.create_custom_job(parent=PARENT, custom_job=v1.CustomJob(
        display_name="sdk-job", labels={"team": "ml"}, job_spec=spec))
    assert created.name.startswith(f"{PARENT}/customJobs/") and created.state == v1.JobState.JOB_STATE_PENDING
    assert jobs.get_custom_job(name=created.name).state == v1.JobState.JOB_STATE_QUEUED  # create answers PENDING
    assert created.job_spec.scheduling.strategy == v1.Scheduling.Strategy.FLEX_START
    assert created.job_spec.scheduling.max_wait_duration.total_seconds() == 1800
    jobs.create_custom_job(parent=PARENT, custom_job=v1.CustomJob(display_name="other", job_spec=job_spec()))

    listed = list(jobs.list_custom_jobs(request={"parent": PARENT, "filter": 'display_name="sdk-job"'}))
    assert [j.name for j in listed] == [created.name]

    emulator.advance(40)  # queued, then provisioning: RUNNING
    assert jobs.get_custom_job(name=created.name).state == v1.JobState.JOB_STATE_RUNNING
    jobs.cancel_custom_job(name=created.name)  # POST {name}:cancel with a body of {}
    emulator.advance(10)
    cancelled = jobs.get_custom_job(name=created.name)
    assert cancelled.state == v1.JobState.JOB_STATE_CANCELLED and cancelled.error.code == 1

    deleted = jobs.delete_custom_job(name=created.name)
    deleted.result(timeout=10)  # done at once; the SDK reads the operation, not a poll
    with pytest.raises(gexc.NotFound):
        jobs.get_custom_job(name=created.name)


def test_a_spec_that_breaks_a_rule_reaches_the_sdk_as_a_400_naming_the_field(jobs):
    bad = job_spec()
    bad.worker_pool_specs[0].machine_spec.accelerator_count = 3  # a2-highgpu-1g has exactly 1
    with pytest.raises(gexc.BadRequest) as raised:  # api_core maps an HTTP 400 to BadRequest
        jobs.create_custom_job(parent=PARENT, custom_job=v1.CustomJob(display_name="bad", job_spec=bad))
    detail = raised.value.details[0]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount"


def test_tuning_job_through_the_sdk(jobs, emulator):
    spec = v1.StudySpec(
        algorithm=v1.StudySpec.Algorithm.GRID_SEARCH,
        metrics=[v1.StudySpec.MetricSpec(metric_id="accuracy", goal=v1.StudySpec.MetricSpec.GoalType.MAXIMIZE)],
        parameters=[v1.StudySpec.ParameterSpec(
            parameter_id="layers", integer_value_spec=v1.StudySpec.ParameterSpec.IntegerValueSpec(
                min_value=5, max_value=6))])
    created = jobs.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=v1.HyperparameterTuningJob(
        display_name="sdk-tune", max_trial_count=2, parallel_trial_count=2, study_spec=spec,
        trial_job_spec=job_spec(run_seconds=30)))
    assert created.state == v1.JobState.JOB_STATE_PENDING and not created.trials  # recorded: none yet
    emulator.advance(1)
    admitted = jobs.get_hyperparameter_tuning_job(name=created.name)
    assert admitted.state == v1.JobState.JOB_STATE_PENDING and [t.id for t in admitted.trials] == ["1", "2"]
    emulator.advance(200)
    done = jobs.get_hyperparameter_tuning_job(name=created.name)
    assert done.state == v1.JobState.JOB_STATE_SUCCEEDED
    assert [t.state for t in done.trials] == [v1.Trial.State.SUCCEEDED] * 2
    assert sorted(t.parameters[0].value for t in done.trials) == [5, 6]
    assert all(t.final_measurement.metrics[0].metric_id == "accuracy" for t in done.trials)
    listed = list(jobs.list_hyperparameter_tuning_jobs(request={"parent": PARENT, "filter": "state=JOB_STATE_SUCCEEDED"}))
    assert [t.name for t in listed] == [created.name]

    running = jobs.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=v1.HyperparameterTuningJob(
        display_name="sdk-tune-2", max_trial_count=2, parallel_trial_count=1, study_spec=spec,
        trial_job_spec=job_spec(run_seconds=300)))
    emulator.advance(40)
    jobs.cancel_hyperparameter_tuning_job(name=running.name)
    emulator.advance(10)
    assert jobs.get_hyperparameter_tuning_job(name=running.name).state == v1.JobState.JOB_STATE_CANCELLED
    jobs.delete_hyperparameter_tuning_job(name=running.name).result(timeout=10)
    with pytest.raises(gexc.NotFound):
        jobs.get_hyperparameter_tuning_job(name=running.name)


def test_training_pipeline_registers_a_model_the_model_service_serves(pipelines, emulator):
    inputs = json_format.ParseDict({
        **json_format.MessageToDict(job_spec(v1.Scheduling.Strategy.SPOT)._pb),
        "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/run1"}}, struct_pb2.Value())
    created = pipelines.create_training_pipeline(parent=PARENT, training_pipeline=v1.TrainingPipeline(
        display_name="sdk-pipeline", training_task_definition=CUSTOM_TASK_DEFINITION, training_task_inputs=inputs,
        model_to_upload=v1.Model(display_name="ranker",
                                 container_spec=v1.ModelContainerSpec(image_uri="gcr.io/p/serve:1"))))
    assert created.state == v1.PipelineState.PIPELINE_STATE_PENDING
    emulator.advance(200)
    done = pipelines.get_training_pipeline(name=created.name)
    assert done.state == v1.PipelineState.PIPELINE_STATE_SUCCEEDED
    model_name = done.model_to_upload.name
    assert model_name.startswith(f"{PARENT}/models/") and done.model_to_upload.version_id == "1"
    listed = list(pipelines.list_training_pipelines(request={"parent": PARENT, "filter": 'display_name="sdk-pipeline"'}))
    assert [p.name for p in listed] == [created.name]

    models = v1.ModelServiceClient(**options(emulator))
    model = models.get_model(name=model_name)
    assert model.display_name == "ranker" and model.artifact_uri == "gs://bucket/run1/model"
    assert [m.name for m in models.list_models(parent=PARENT)] == [model_name]

    second = pipelines.create_training_pipeline(parent=PARENT, training_pipeline=v1.TrainingPipeline(
        display_name="sdk-pipeline-2", training_task_definition=CUSTOM_TASK_DEFINITION, training_task_inputs=inputs,
        model_to_upload=v1.Model(display_name="ranker",
                                 container_spec=v1.ModelContainerSpec(image_uri="gcr.io/p/serve:1"))))
    pipelines.cancel_training_pipeline(name=second.name)
    emulator.advance(10)
    assert pipelines.get_training_pipeline(name=second.name).state == v1.PipelineState.PIPELINE_STATE_CANCELLED
    pipelines.delete_training_pipeline(name=second.name).result(timeout=10)


def test_sdk_waits_for_a_persistent_resource_through_its_operation(jobs, emulator):
    resources = v1.PersistentResourceServiceClient(**options(emulator))
    operation = resources.create_persistent_resource(
        parent=PARENT, persistent_resource_id="sdk-pool",
        persistent_resource=v1.PersistentResource(display_name="sdk-pool", resource_pools=[
            v1.ResourcePool(id="a100s", machine_spec=A100, replica_count=1)]))
    name = f"{PARENT}/persistentResources/sdk-pool"
    assert operation.operation.name.startswith(f"{name}/operations/")
    assert not operation.done()  # polled at GET /ui/{operation name}
    emulator.advance(61)  # the scenario's resource_provisioning_seconds is 60
    resource = operation.result(timeout=30)
    assert isinstance(resource, v1.PersistentResource)
    assert resource.name == name and resource.state == v1.PersistentResource.State.RUNNING
    assert operation.metadata.generic_metadata.create_time is not None
    assert emulator.stats()["requests"]["persistentResources.operations.get"] >= 2  # the SDK polled it

    assert resources.get_persistent_resource(name=name).state == v1.PersistentResource.State.RUNNING
    assert [r.name for r in resources.list_persistent_resources(parent=PARENT)] == [name]
    job = jobs.create_custom_job(parent=PARENT, custom_job=v1.CustomJob(
        display_name="on-pool", job_spec=job_spec(persistent_resource_id="sdk-pool", run_seconds=30)))
    emulator.advance(5)
    assert jobs.get_custom_job(name=job.name).state == v1.JobState.JOB_STATE_RUNNING
    with pytest.raises(gexc.BadRequest, match="is running jobs"):  # FAILED_PRECONDITION is an HTTP 400
        resources.delete_persistent_resource(name=name)
    emulator.advance(60)
    resources.delete_persistent_resource(name=name).result(timeout=10)
    with pytest.raises(gexc.NotFound):
        resources.get_persistent_resource(name=name)


def test_cloud_quotas_sdk_lists_the_emulators_quota_infos(emulator):
    metric = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    emulator.set_quota_limit(metric, 16, region=LOCATION)
    quotas = cloudquotas_v1.CloudQuotasClient(**options(emulator))
    infos = list(quotas.list_quota_infos(
        parent=f"projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com"))
    assert infos and all(i.service == "aiplatform.googleapis.com" for i in infos)
    a100 = [i for i in infos if i.metric == metric]
    assert len(a100) == 1
    limits = {tuple(d.applicable_locations): d.details.value for d in a100[0].dimensions_infos}
    assert limits[(LOCATION,)] == 16
    one = quotas.get_quota_info(name=a100[0].name)
    assert one.quota_id == a100[0].quota_id
