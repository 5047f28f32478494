"""The catalogue of bad input: each is rejected before any API call (the emulator's create count
stays 0), with a message that names the field and the rule."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_gpu_sched.operators import (
    FlexStartTrainingOperator,
    GpuTrainingOperator,
    PersistentResourceTrainingOperator,
    SpotTrainingOperator,
)
from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
from tests.conftest import LOCATION, PROJECT, with_a100_pool

BASE = dict(project_id=PROJECT, location=LOCATION, deferrable=False, poll_interval=0.02)
A100 = dict(image_uri="gcr.io/p/t:1", machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
            accelerator_count=1)
POOL = {"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
        "replicaCount": 1, "containerSpec": {"imageUri": "gcr.io/p/t:1"}}


def pools(*changes: dict) -> list[dict]:
    out = []
    for change in changes:
        pool = {k: (dict(v) if isinstance(v, dict) else v) for k, v in POOL.items()}
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(pool.get(key), dict):
                pool[key] = {**pool[key], **value}
            elif value is None:
                pool.pop(key, None)
            else:
                pool[key] = value
        out.append(pool)
    return out


def flex(**kw):
    return FlexStartTrainingOperator(task_id="t", **{**BASE, **A100, **kw})


def spot(**kw):
    return SpotTrainingOperator(task_id="t", **{**BASE, **A100, **kw})


def with_pools(cls, *changes, **kw):
    return cls(task_id="t", worker_pool_specs=pools(*changes), **{**BASE, **kw})


def rendered(op, **attrs):
    """What template rendering does: set the fields to their rendered values."""
    for name, value in attrs.items():
        setattr(op, name, value)
    return op


STUDY = {"metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
         "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}}]}
H100 = {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}}

# (id, factory, field named, words of the rule)
CATALOGUE = [
    ("flex-start-t4", lambda: with_pools(FlexStartTrainingOperator, {"machineSpec": {
        "machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4"}}), "acceleratorType", "FLEX_START"),
    ("flex-start-cpu-only", lambda: with_pools(FlexStartTrainingOperator, {"machineSpec": {
        "machineType": "n1-standard-8", "acceleratorType": None, "acceleratorCount": None}}),
     "acceleratorType", "got no GPU"),
    ("flex-start-timeout-over-7-days", lambda: flex(timeout="8d"), "scheduling.timeout", "at most 7 days"),
    ("flex-start-unequal-pools", lambda: with_pools(FlexStartTrainingOperator, {}, H100),
     "workerPoolSpecs[1].machineSpec", "same machine configuration"),
    ("spot-on-n1", lambda: with_pools(SpotTrainingOperator, {"machineSpec": {
        "machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4"}}), "machineType", "A2 and A3"),
    ("spot-on-g2", lambda: with_pools(SpotTrainingOperator, {"machineSpec": {
        "machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4"}}), "machineType", "A2 and A3"),
    ("tpu-with-spot", lambda: with_pools(SpotTrainingOperator, {"machineSpec": {
        "machineType": "cloud-tpu", "acceleratorType": "TPU_V2", "acceleratorCount": 8}}), "acceleratorType",
     "cannot be used with TPUs"),
    ("missing-image", lambda: with_pools(SpotTrainingOperator, {"containerSpec": {"imageUri": ""}}),
     "containerSpec.imageUri", "required"),
    ("container-and-python-package", lambda: with_pools(SpotTrainingOperator, {"pythonPackageSpec": {
        "executorImageUri": "x", "packageUris": ["gs://b/p.tgz"], "pythonModule": "m"}}),
     "workerPoolSpecs[0]", "exactly one of containerSpec or pythonPackageSpec"),
    ("python-package-without-module", lambda: with_pools(SpotTrainingOperator, {"containerSpec": None,
        "pythonPackageSpec": {"executorImageUri": "x", "packageUris": ["gs://b/p.tgz"]}}), "pythonModule", "required"),
    ("accelerator-without-count", lambda: spot(accelerator_count=None), "acceleratorType", "together"),
    ("accelerator-count-the-machine-lacks", lambda: spot(accelerator_count=4), "acceleratorCount", "counts of [1]"),
    ("accelerator-the-machine-lacks", lambda: spot(accelerator_type="NVIDIA_H100_80GB"), "acceleratorType",
     "not supported for machine type"),
    ("unknown-accelerator", lambda: spot(accelerator_type="NVIDIA_GTX_1080"), "acceleratorType",
     "not a known accelerator"),
    ("gpu-machine-without-accelerator", lambda: spot(accelerator_type=None, accelerator_count=None),
     "acceleratorType", "carries 1 x NVIDIA_TESLA_A100"),
    ("missing-machine-type", lambda: spot(machine_type=None, accelerator_type=None, accelerator_count=None),
     "machineType", "required"),
    ("first-pool-two-replicas", lambda: spot(replica_count=2), "replicaCount", "primary replica"),
    ("zero-replicas", lambda: with_pools(SpotTrainingOperator, {}, {"replicaCount": 0}), "workerPoolSpecs[1].replicaCount",
     "at least 1"),
    ("bad-boot-disk-type", lambda: with_pools(SpotTrainingOperator, {"diskSpec": {"bootDiskType": "nvme"}}),
     "bootDiskType", "must be one of"),
    ("boot-disk-too-small", lambda: with_pools(SpotTrainingOperator, {"diskSpec": {"bootDiskSizeGb": 10}}),
     "bootDiskSizeGb", "between 100 and 64000"),
    ("label-too-long", lambda: spot(labels={"team": "x" * 64}), "labels.team", "at most 63"),
    ("label-upper-case", lambda: spot(labels={"Team": "ml"}), "labels.Team", "lowercase"),
    ("display-name-too-long", lambda: spot(display_name="x" * 129), "displayName", "1 to 128"),
    ("timeout-zero", lambda: spot(timeout=0), "scheduling.timeout", "greater than 0"),
    ("negative-wait", lambda: flex(max_wait_duration=timedelta(minutes=-5)), "maxWaitDuration", "0 (wait forever)"),
    ("unparseable-wait", lambda: flex(max_wait_duration="two hours"), "max_wait_duration", "not a duration"),
    ("negative-preemption-budget", lambda: spot(max_preemption_retries=-1), "max_preemption_retries", ">= 0"),
    ("unknown-strategy", lambda: GpuTrainingOperator(task_id="t", plan=[{"strategy": "CHEAPEST"}], **BASE, **A100),
     "plan[0].strategy", "must be one of"),
    ("unknown-step-argument", lambda: GpuTrainingOperator(task_id="t", plan=[{"strategy": "SPOT", "budget": 3}],
                                                          **BASE, **A100), "plan[0].budget", "not an argument"),
    ("spot-step-on-g2-in-a-plan", lambda: GpuTrainingOperator(task_id="t", plan=[
        {"strategy": "STANDARD"}, {"strategy": "SPOT"}], **BASE, **{**A100, "machine_type": "g2-standard-8",
                                                                   "accelerator_type": "NVIDIA_L4"}),
     "machineType", "plan[1] SPOT"),
    ("bad-persistent-resource-id", lambda: PersistentResourceTrainingOperator(
        task_id="t", persistent_resource_id="Pool_A", **BASE, **A100), "persistent_resource_id",
     "not a persistent resource id"),
    ("pool-that-can-never-fit", lambda: PersistentResourceTrainingOperator(
        task_id="t", persistent_resource_id="pool-a", **BASE, **{**A100, "machine_type": "a2-highgpu-2g",
                                                                   "accelerator_count": 2}),
     "workerPoolSpecs[0].machineSpec", "no resource pool"),
    ("template-renders-an-invalid-label", lambda: rendered(spot(labels={"team": "{{ params.team }}"}),
                                                           labels={"team": "ML Team"}), "labels.team", "lowercase"),
    ("non-json-worker-pool-specs", lambda: rendered(SpotTrainingOperator(
        task_id="t", worker_pool_specs="{{ var.value.pools }}", **BASE), worker_pool_specs="[{machineSpec:"),
     "worker_pool_specs", "not JSON"),
    ("pools-and-shorthand-both", lambda: SpotTrainingOperator(task_id="t", worker_pool_specs=[POOL], **BASE, **A100),
     "worker_pool_specs", "not both"),
    ("env-not-a-mapping", lambda: spot(env=["A=1"]), "env", "mapping"),
    ("tuning-parallel-trials-over-max", lambda: spot(job_type="hyperparameter_tuning_job", study_spec=STUDY,
                                                     max_trial_count=2, parallel_trial_count=4),
     "parallel_trial_count", "must not exceed max_trial_count"),
    ("tuning-without-metrics", lambda: spot(job_type="hyperparameter_tuning_job", max_trial_count=2,
                                            study_spec={**STUDY, "metrics": []}), "study_spec.metrics",
     "at least one metric"),
    ("tuning-goal-unknown", lambda: spot(job_type="hyperparameter_tuning_job", max_trial_count=2, study_spec={
        **STUDY, "metrics": [{"metricId": "accuracy", "goal": "BIGGER"}]}), "study_spec.metrics[0].goal",
     "MAXIMIZE or MINIMIZE"),
    ("tuning-range-upside-down", lambda: spot(job_type="hyperparameter_tuning_job", max_trial_count=2, study_spec={
        **STUDY, "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.01}}]}),
     "study_spec.parameters[0].doubleValueSpec.minValue", "must not exceed maxValue"),
    ("tuning-study-renders-non-json", lambda: rendered(spot(
        job_type="hyperparameter_tuning_job", max_trial_count=2, study_spec="{{ var.value.study }}"),
        study_spec="{metrics:"), "study_spec", "JSON"),
    ("study-spec-on-a-custom-job", lambda: spot(study_spec=STUDY), "study_spec", "applies to job_type"),
    ("pipeline-without-serving-image", lambda: spot(job_type="training_pipeline", model_display_name="m"),
     "model_serving_image_uri", "required"),
    ("pipeline-parent-model-not-a-name", lambda: spot(job_type="training_pipeline", model_display_name="m",
                                                      model_serving_image_uri="gcr.io/p/serve:1",
                                                      parent_model="models/1"), "parent_model", "resource name"),
    ("unknown-job-type", lambda: spot(job_type="automl"), "job_type", "must be one of"),
    ("deadline-of-the-wrong-type", lambda: GpuTrainingOperator(task_id="t", plan=[{"strategy": "STANDARD"}],
                                                               deadline="tomorrow", **BASE, **A100),
     "deadline", "datetime or a timedelta"),
]


@pytest.mark.parametrize("factory, field, words", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_bad_input_is_rejected_before_any_api_call(fast_emulator, factory, field, words):
    fast_emulator.reset(with_a100_pool())
    with pytest.raises(InvalidTrainingSpec) as raised:
        factory().execute({})  # parse time for literal values; after rendering for templated ones
    message = str(raised.value)
    assert field in message and words in message, message
    assert not [rpc for rpc in fast_emulator.stats()["requests"] if rpc.endswith(".create")]  # of any job type


def test_the_catalogue_is_large_enough():
    assert len(CATALOGUE) >= 30
