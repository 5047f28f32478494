"""Every rule rejects a bad spec with a message that names the field and says the rule."""

from __future__ import annotations

import copy

import pytest

from airflow_gpu_sched.vertex.models import CustomJob, PersistentResource
from airflow_gpu_sched.vertex.persistent_rules import check_persistent_fit
from airflow_gpu_sched.vertex.rules import (
    SpecError,
    check_custom_job,
    validate_custom_job,
)
from tests.conftest import load_seed


def _pool(machine="a2-highgpu-1g", accelerator="NVIDIA_TESLA_A100", count=1, replicas=1):
    machine_spec = {"machineType": machine}
    if accelerator:
        machine_spec.update(acceleratorType=accelerator, acceleratorCount=count)
    return {"machineSpec": machine_spec, "replicaCount": replicas, "containerSpec": {"imageUri": "gcr.io/p/t:1"}}


def _job(strategy="STANDARD", pools=None, **scheduling):
    return {"displayName": "train", "labels": {"team": "ml"},
            "jobSpec": {"workerPoolSpecs": pools or [_pool()], "scheduling": {"strategy": strategy, **scheduling}}}


def _set(body, path, value):
    body = copy.deepcopy(body)
    *parents, last = path
    target = body
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return body


_DELETE = object()
WPS = ("jobSpec", "workerPoolSpecs")

# (id, body, field path the violation names, words of the rule)
CASES = [
    ("display-name-empty", _set(_job(), ("displayName",), ""), "displayName", "1 to 128"),
    ("display-name-too-long", _set(_job(), ("displayName",), "x" * 129), "displayName", "1 to 128"),
    ("label-key-upper-case", _set(_job(), ("labels",), {"Team": "ml"}), "labels.Team", "lowercase"),
    ("label-value-too-long", _set(_job(), ("labels",), {"team": "a" * 64}), "labels.team", "63"),
    ("label-key-starts-with-digit", _set(_job(), ("labels",), {"1team": "ml"}), "labels.1team", "starting with a letter"),
    ("no-worker-pools", _set(_job(), WPS, []), "jobSpec.workerPoolSpecs", "at least one"),
    ("first-pool-empty", _set(_job(), WPS, [{}, _pool()]), "jobSpec.workerPoolSpecs[0]", "cannot be empty"),
    ("container-and-package", _set(_job(), (*WPS, 0, "pythonPackageSpec"),
                                   {"executorImageUri": "x", "packageUris": ["gs://b/p.tgz"], "pythonModule": "m"}),
     "jobSpec.workerPoolSpecs[0]", "exactly one of containerSpec or pythonPackageSpec"),
    ("neither-container-nor-package", _set(_job(), (*WPS, 0, "containerSpec"), _DELETE),
     "jobSpec.workerPoolSpecs[0]", "exactly one"),
    ("missing-image", _set(_job(), (*WPS, 0, "containerSpec"), {"args": ["x"]}),
     "jobSpec.workerPoolSpecs[0].containerSpec.imageUri", "required"),
    ("package-without-module", _set(_set(_job(), (*WPS, 0, "containerSpec"), _DELETE), (*WPS, 0, "pythonPackageSpec"),
                                    {"executorImageUri": "x", "packageUris": ["gs://b/p.tgz"]}),
     "jobSpec.workerPoolSpecs[0].pythonPackageSpec.pythonModule", "required"),
    ("accelerator-without-count", _set(_job(), (*WPS, 0, "machineSpec", "acceleratorCount"), _DELETE),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "together"),
    ("accelerator-machine-cannot-carry", _set(_job(), (*WPS, 0, "machineSpec", "acceleratorType"), "NVIDIA_L4"),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "not supported for machine type"),
    ("accelerator-count-machine-cannot-carry", _set(_job(), (*WPS, 0, "machineSpec", "acceleratorCount"), 2),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount", "counts of [1]"),
    ("gpu-machine-without-accelerator", _job(pools=[_pool(accelerator=None)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "carries 1 x NVIDIA_TESLA_A100"),
    ("unknown-accelerator", _set(_job(), (*WPS, 0, "machineSpec", "acceleratorType"), "NVIDIA_QUANTUM_9000"),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "not a known accelerator"),
    ("retired-k80-on-n1", _job(pools=[load_seed("seed_002_persistent_pool.json") | {"containerSpec": {"imageUri": "x"}}]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "not supported for machine type 'n1-standard-4'"),
    ("missing-machine-type", _set(_job(), (*WPS, 0, "machineSpec"), {}),
     "jobSpec.workerPoolSpecs[0].machineSpec.machineType", "required"),
    ("first-pool-two-replicas", _job(pools=[_pool(replicas=2)]), "jobSpec.workerPoolSpecs[0].replicaCount",
     "primary replica"),
    ("zero-replicas", _job(pools=[_pool(), _pool(replicas=0)]), "jobSpec.workerPoolSpecs[1].replicaCount", "at least 1"),
    ("bad-boot-disk-type", _set(_job(), (*WPS, 0, "diskSpec"), {"bootDiskType": "nvme"}),
     "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskType", "must be one of"),
    ("timeout-zero", _job(timeout="0s"), "jobSpec.scheduling.timeout", "greater than 0"),
    ("negative-max-wait", _job("FLEX_START", maxWaitDuration="-60s"), "jobSpec.scheduling.maxWaitDuration", "0 (wait forever) or more"),
    ("unknown-strategy", _job("CHEAPEST"), "jobSpec.scheduling.strategy", "unknown strategy"),
    ("flex-start-t4", _job("FLEX_START", pools=[_pool("n1-standard-8", "NVIDIA_TESLA_T4")]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "FLEX_START (Dynamic Workload Scheduler) needs GPUs"),
    ("flex-start-cpu-only", _job("FLEX_START", pools=[_pool("n1-standard-8", None)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "got no GPU"),
    ("flex-start-timeout-over-7-days", _job("FLEX_START", timeout="8d"), "jobSpec.scheduling.timeout", "at most 7 days"),
    ("flex-start-unequal-pools", _job("FLEX_START", pools=[_pool(), _pool("a2-highgpu-2g", count=2)]),
     "jobSpec.workerPoolSpecs[1].machineSpec", "same machine configuration"),
    ("spot-on-n1", _job("SPOT", pools=[_pool("n1-standard-8", "NVIDIA_TESLA_T4")]),
     "jobSpec.workerPoolSpecs[0].machineSpec.machineType", "A2 and A3 machine series only"),
    ("spot-on-g2", _job("SPOT", pools=[_pool("g2-standard-8", "NVIDIA_L4")]),
     "jobSpec.workerPoolSpecs[0].machineSpec.machineType", "A2 and A3"),
    ("spot-with-tpu", _job("SPOT", pools=[_pool("cloud-tpu", "TPU_V2", count=8)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "cannot be used with TPUs"),
    ("no-cloud-tpu-v3-machine", _job(pools=[_pool("cloud-tpu-v3", "TPU_V3", count=8)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "not supported for machine type 'cloud-tpu-v3'"),
    ("tpu-v2-pod-of-2048", _job(pools=[_pool("cloud-tpu", "TPU_V2", count=2048)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount", "[8, 32, 128, 256, 512]"),
    ("tpu-machine-without-accelerator", _job(pools=[_pool("cloud-tpu", None)]),
     "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "TPU machine type"),
    ("persistent-resource-bad-id", _set(_job(), ("jobSpec", "persistentResourceId"), "Pool_A"),
     "jobSpec.persistentResourceId", "not a persistent resource id"),
    ("persistent-resource-with-spot", _set(_job("SPOT"), ("jobSpec", "persistentResourceId"), "pool-a"),
     "jobSpec.scheduling.strategy", "persistent resource"),
]


@pytest.mark.parametrize("body, field, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule_rejects_with_field_and_words(body, field, words):
    violations = check_custom_job(CustomJob.model_validate(body))
    assert any(v.path == field and words in v.rule for v in violations), violations
    with pytest.raises(SpecError) as raised:
        validate_custom_job(CustomJob.model_validate(body))
    assert field in str(raised.value)


@pytest.mark.parametrize("body", [
    _job(), _job("FLEX_START", timeout="7d", maxWaitDuration="0s"), _job("SPOT", pools=[_pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)]),
    _job("FLEX_START", pools=[_pool("g2-standard-24", "NVIDIA_L4", 2), _pool("g2-standard-24", "NVIDIA_L4", 2, replicas=3)]),
    _job(pools=[_pool("n1-standard-8", "NVIDIA_TESLA_T4", 4)]), _job(pools=[_pool("e2-standard-4", None)]),
    load_seed("seed_000_flex_start.json"), load_seed("seed_001_spot.json"),
    # google-cloud-aiplatform's own tests submit cloud-tpu with TPU_V3 x 32 (a v3-32 Pod slice)
    _job(pools=[_pool("cloud-tpu", "TPU_V3", count=32)]), _job(pools=[_pool("cloud-tpu", "TPU_V2", count=8)]),
], ids=["standard", "flex-7d-forever", "spot-a3", "flex-two-equal-pools", "n1-t4", "cpu-only", "seed-000", "seed-001",
        "tpu-v3-32-pod", "tpu-v2-8"])
def test_valid_specs_pass(body):
    assert check_custom_job(CustomJob.model_validate(body)) == []


def test_every_violation_is_reported_at_once():
    body = _job("FLEX_START", pools=[_pool("n1-standard-8", "NVIDIA_TESLA_T4")], timeout="9d")
    body["displayName"] = ""
    paths = {v.path for v in check_custom_job(CustomJob.model_validate(body))}
    assert {"displayName", "jobSpec.scheduling.timeout", "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"} <= paths


RESOURCE = PersistentResource.model_validate({"name": "projects/p/locations/l/persistentResources/pool-a", "resourcePools": [
    {"id": "a100s", "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                    "acceleratorCount": 1}, "replicaCount": "4", "usedReplicaCount": "3",
     "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}},
    {"id": "cpus", "machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": "2",
     "diskSpec": {"bootDiskType": "pd-standard"}},
]})


def _spec(*pools):
    return CustomJob.model_validate(_job(pools=list(pools))).job_spec


def test_persistent_fit_assigns_matching_pools():
    fit = check_persistent_fit(_spec(_pool(), _pool("n1-standard-8", None) | {"diskSpec": {"bootDiskType": "pd-standard"}}), RESOURCE)
    assert fit.runs_now and fit.assignment == {0: "a100s", 1: "cpus"}


def test_persistent_fit_lists_every_mismatch():
    fit = check_persistent_fit(_spec(_pool() | {"diskSpec": {"bootDiskType": "pd-standard"}},
                                     _pool("a2-highgpu-2g", count=2)), RESOURCE)
    assert [v.path for v in fit.mismatches] == ["jobSpec.workerPoolSpecs[0].machineSpec",
                                                "jobSpec.workerPoolSpecs[1].machineSpec"]
    assert "a2-highgpu-1g with 1 x NVIDIA_TESLA_A100 on pd-standard" in fit.mismatches[0].rule
    assert "a100s:" in fit.mismatches[0].rule


def test_persistent_fit_tells_busy_from_never_fits():
    busy = check_persistent_fit(_spec(_pool(), _pool(replicas=1)), RESOURCE)
    assert busy.fits and not busy.runs_now
    assert busy.shortages[0].resource_pool_id == "a100s" and busy.shortages[0].free == 1
    never = check_persistent_fit(_spec(_pool(), _pool(replicas=4)), RESOURCE)
    assert not never.fits
    assert "holds at most 4" in never.mismatches[0].rule


def _a3_ultra_resource(disk_type):
    pool = {"id": "h200s", "machineSpec": {"machineType": "a3-ultragpu-8g", "acceleratorType": "NVIDIA_H200_141GB",
                                           "acceleratorCount": 8}, "replicaCount": "2"}
    if disk_type:
        pool["diskSpec"] = {"bootDiskType": disk_type}
    return PersistentResource.model_validate({"name": "projects/p/locations/l/persistentResources/h200",
                                              "resourcePools": [pool]})


@pytest.mark.parametrize("declared, fits", [("hyperdisk-balanced", True), (None, True), ("pd-ssd", False)])
def test_a3_ultra_pool_without_disk_spec_defaults_to_hyperdisk(declared, fits):
    # machine_resources.proto, DiskSpec.boot_disk_type: A3U machines default to hyperdisk-balanced
    job = _spec(_pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", count=8))
    fit = check_persistent_fit(job, _a3_ultra_resource(declared))
    assert fit.fits is fits
    if not fits:
        assert "on hyperdisk-balanced" in fit.mismatches[0].rule


def test_other_machines_still_default_to_pd_ssd():
    from airflow_gpu_sched.vertex import catalog

    assert catalog.default_boot_disk_type("a3-ultragpu-8g") == "hyperdisk-balanced"
    assert [catalog.default_boot_disk_type(m) for m in ("a3-highgpu-8g", "a3-megagpu-8g", "a4-highgpu-8g")] == ["pd-ssd"] * 3
    assert check_persistent_fit(_spec(_pool()), RESOURCE).fits  # a2 with no diskSpec matches the pd-ssd pool
