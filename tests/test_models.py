"""Models: the seeds' REST bodies round-trip; wire encodings parse both ways, emit one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu_sched.vertex.enums import AcceleratorType, JobState, Strategy
from airflow_gpu_sched.vertex.models import CustomJob, PersistentResource, Scheduling, WorkerPoolSpec
from airflow_gpu_sched.vertex.wire_scalars import format_duration, parse_duration
from tests.conftest import load_seed


@pytest.mark.parametrize("seed", ["seed_000_flex_start.json", "seed_001_spot.json"])
def test_seed_jobs_round_trip_to_equal_json(seed):
    body = load_seed(seed)
    job = CustomJob.model_validate(body)
    # int64 replicaCount is written as a string, the only canonical change from the seeds
    expected = json.loads(json.dumps(body).replace('"replicaCount": 1', '"replicaCount": "1"'))
    assert job.to_api() == expected
    assert CustomJob.model_validate(job.to_api()).to_api() == expected


def test_seed_persistent_pool_round_trips():
    body = load_seed("seed_002_persistent_pool.json")
    pool = WorkerPoolSpec.model_validate(body)
    assert pool.to_api() == {**body, "replicaCount": "1"}
    assert pool.machine_spec.accelerator_type is AcceleratorType.NVIDIA_TESLA_K80


def test_seed_000_reads_strategy_and_wait():
    job = CustomJob.model_validate(load_seed("seed_000_flex_start.json"))
    assert job.job_spec.strategy is Strategy.FLEX_START
    assert job.job_spec.scheduling.max_wait_duration == timedelta(seconds=1800)


@pytest.mark.parametrize(
    "raw, seconds",
    [("1800s", 1800), ("3.5s", 3.5), (1800, 1800), (2.5, 2.5), (timedelta(hours=2), 7200), ("2h", 7200),
     ("30m", 1800), ("1d", 86400), ("1h30m", 5400), ("0s", 0), ("-5s", -5), ("250ms", 0.25)],
    ids=str,
)
def test_durations_parse_from_every_form(raw, seconds):
    assert parse_duration(raw).total_seconds() == seconds


@pytest.mark.parametrize("raw", ["soon", "2 hours", "", True, None, "h2"], ids=repr)
def test_bad_durations_say_which_forms_work(raw):
    with pytest.raises(ValueError, match="not a duration|boolean"):
        parse_duration(raw)


def test_durations_are_written_as_seconds_strings():
    scheduling = Scheduling(timeout="2h", max_wait_duration=1.5)
    assert scheduling.to_api() == {"timeout": "7200s", "maxWaitDuration": "1.5s"}


def test_int64_read_from_string_or_number_written_as_string():
    assert WorkerPoolSpec.model_validate({"replicaCount": "3"}).replica_count == 3
    assert WorkerPoolSpec.model_validate({"replicaCount": 3}).to_api() == {"replicaCount": "3"}


def test_enums_read_from_proto_numbers_as_google_rest_clients_send_them():
    spec = CustomJob.model_validate({"jobSpec": {
        "workerPoolSpecs": [{"machineSpec": {"acceleratorType": 13, "acceleratorCount": 8}}],
        "scheduling": {"strategy": 6}}})
    assert spec.job_spec.strategy is Strategy.FLEX_START
    assert spec.job_spec.worker_pool_specs[0].machine_spec.accelerator_type is AcceleratorType.NVIDIA_H100_80GB
    assert spec.to_api()["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"


def test_unknown_fields_and_enum_values_in_responses_never_break_parsing():
    job = CustomJob.model_validate({
        "name": "projects/p/locations/l/customJobs/1", "state": "JOB_STATE_BRAND_NEW",
        "someFutureField": {"x": 1}, "jobSpec": {"workerPoolSpecs": [], "futureKnob": True},
    })
    assert job.state.value == "JOB_STATE_BRAND_NEW" and not job.state.is_known
    assert not job.is_terminal()
    # kept verbatim, not dropped: a job_spec= body's fields we do not model (network,
    # encryptionSpec, ...) must reach Vertex; a create strips the output-only ones it knows
    assert job.to_api()["someFutureField"] == {"x": 1} and job.to_api()["jobSpec"]["futureKnob"] is True


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.name)
def test_terminal_states(state):
    terminal = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
                "JOB_STATE_PARTIALLY_SUCCEEDED"}
    assert state.is_terminal() == (state.name in terminal)


def test_persistent_resource_pool_capacity_uses_autoscaling_max():
    resource = PersistentResource.model_validate({"resourcePools": [
        {"id": "a", "replicaCount": "2", "usedReplicaCount": "1", "autoscalingSpec": {"maxReplicaCount": "5"}}]})
    assert resource.resource_pools[0].capacity == 5
    assert resource.resource_pools[0].free_replicas == 4


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
_pool = st.fixed_dictionaries({
    "machineSpec": st.fixed_dictionaries({
        "machineType": _names,
        "acceleratorType": st.sampled_from([a.value for a in AcceleratorType]),
        "acceleratorCount": st.integers(1, 16)}),
    "replicaCount": st.integers(1, 10_000).map(str),
    "containerSpec": st.fixed_dictionaries({"imageUri": _names, "args": st.lists(_names, max_size=3)}),
})


@given(pools=st.lists(_pool, min_size=1, max_size=4),
       strategy=st.sampled_from([s.value for s in Strategy]),
       wait=st.integers(0, 10**7),
       labels=st.dictionaries(_names, _names, max_size=3))
def test_any_canonical_job_round_trips(pools, strategy, wait, labels):
    body = {"displayName": "j", "labels": labels, "jobSpec": {
        "workerPoolSpecs": pools, "scheduling": {"strategy": strategy, "maxWaitDuration": f"{wait}s"}}}
    if not labels:
        del body["labels"]
    assert CustomJob.model_validate(body).to_api() == body
    assert format_duration(parse_duration(f"{wait}s")) == f"{wait}s"


def test_absent_keys_read_as_proto3_defaults():
    """Vertex prints no default of a field without presence (issue 40): an operation not done has
    no ``done``, an idle pool no ``usedReplicaCount``, a quota limit of 0 is ``details: {}``."""
    from airflow_gpu_sched.vertex.job_type_models import QuotaInfo
    from airflow_gpu_sched.vertex.models import Operation, PersistentResource

    assert Operation.from_api({"name": "projects/p/locations/l/operations/1"}).done is False
    pool = PersistentResource.from_api({"resourcePools": [{"id": "a", "replicaCount": "2"}]}).resource_pools[0]
    assert pool.used_replica_count == 0 and pool.free_replicas == 2
    info = QuotaInfo.model_validate({"dimensionsInfos": [{"dimensions": {"region": "us-east4"}, "details": {}},
                                                         {"details": {"value": "8"}}]})
    assert info.limit_for("us-east4") == 0  # a 0 limit, not unknown
    assert info.limit_for("europe-west4") == 8  # the default info has no dimensions at all
