"""The emulator at the wire: every strategy's life cycle, errors, list filters and paging.

Every Vertex response a test receives is checked against the aiplatform v1 discovery
document (``tests/conformance.py``), so the emulator cannot drift from Google's schemas.
"""

from __future__ import annotations

import copy
import json

import pytest
import requests

from tests.conformance import conformance_errors
from tests.conftest import LOCATION, PROJECT, load_seed

SCHEMA_OF = {
    "customJobs.create": "GoogleCloudAiplatformV1CustomJob",
    "customJobs.get": "GoogleCloudAiplatformV1CustomJob",
    "customJobs.list": "GoogleCloudAiplatformV1ListCustomJobsResponse",
    "customJobs.cancel": "GoogleProtobufEmpty",
    "customJobs.delete": "GoogleLongrunningOperation",
    "persistentResources.create": "GoogleLongrunningOperation",
    "persistentResources.get": "GoogleCloudAiplatformV1PersistentResource",
    "persistentResources.list": "GoogleCloudAiplatformV1ListPersistentResourcesResponse",
    "operations.get": "GoogleLongrunningOperation",
    "persistentResources.operations.get": "GoogleLongrunningOperation",
}


class Vertex:
    """Raw HTTP calls to the emulator's Vertex surface; checks every body's conformance."""

    def __init__(self, url: str):
        self.root = f"{url}/v1/"
        self.parent = f"projects/{PROJECT}/locations/{LOCATION}"

    def call(self, rpc: str, method: str, path: str, expect: int = 200, **kw) -> dict:
        response = requests.request(method, self.root + path, timeout=10, **kw)
        body = response.json()
        assert response.status_code == expect, body
        if expect == 200:
            assert conformance_errors(body, SCHEMA_OF[rpc]) == []
        else:
            assert set(body) == {"error"} and body["error"]["code"] == expect and body["error"]["status"]
        return body

    def create(self, body: dict, expect: int = 200) -> dict:
        return self.call("customJobs.create", "POST", f"{self.parent}/customJobs", expect, json=body)

    def get(self, name: str) -> dict:
        return self.call("customJobs.get", "GET", name)

    def state(self, name: str) -> str:
        return self.get(name)["state"].removeprefix("JOB_STATE_")

    def list(self, **params) -> dict:
        return self.call("customJobs.list", "GET", f"{self.parent}/customJobs", params=params)

    def cancel(self, name: str, expect: int = 200) -> dict:
        return self.call("customJobs.cancel", "POST", f"{name}:cancel", expect, json={})


@pytest.fixture
def vertex(emulator) -> Vertex:
    return Vertex(emulator.url)


def job(strategy="STANDARD", run_seconds=600, exit_code=None, machine="a2-highgpu-1g",
        accelerator="NVIDIA_TESLA_A100", count=1, labels=None, **scheduling) -> dict:
    env = [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]
    if exit_code is not None:
        env.append({"name": "EMULATOR_EXIT_CODE", "value": str(exit_code)})
    return {"displayName": f"{strategy.lower()}-job", "labels": labels or {"team": "ml"},
            "jobSpec": {"workerPoolSpecs": [{
                "machineSpec": {"machineType": machine, "acceleratorType": accelerator, "acceleratorCount": count},
                "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/trainer:1", "env": env}}],
                "scheduling": {"strategy": strategy, **scheduling}}}


# ---------------------------------------------------------------------------- seeds and rules


@pytest.mark.parametrize("seed", ["seed_000_flex_start.json", "seed_001_spot.json"])
def test_seed_bodies_are_accepted(vertex, seed):
    created = vertex.create(load_seed(seed))
    assert created["state"] == "JOB_STATE_PENDING" and "startTime" not in created  # the create answer (recorded)
    assert vertex.state(created["name"]) == "QUEUED"
    assert created["name"].startswith(f"{vertex.parent}/customJobs/")
    assert created["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"


def test_flex_start_t4_gets_400_naming_accelerator_type(vertex, emulator):
    body = load_seed("seed_000_flex_start.json")
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineType="n1-standard-8",
                                                                 acceleratorType="NVIDIA_TESLA_T4")
    error = vertex.create(body, expect=400)["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType" in error["message"]
    violations = error["details"][0]["fieldViolations"]
    assert violations[0]["field"] == "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"
    assert emulator.stats()["jobsCreated"] == {}


def test_google_rest_clients_integer_enums_are_accepted(vertex):
    body = job("FLEX_START")
    body["jobSpec"]["scheduling"]["strategy"] = 6
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = 8
    created = vertex.create(body)
    assert created["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"
    assert created["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_A100"


def test_malformed_json_and_unknown_routes_get_google_shaped_errors(vertex):
    response = requests.post(f"{vertex.root}{vertex.parent}/customJobs", data="{not json", timeout=10)
    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"
    missing = requests.get(f"{vertex.root}{vertex.parent}/customJobs/42", timeout=10)
    assert missing.status_code == 404 and "does not exist" in missing.json()["error"]["message"]


# ---------------------------------------------------------------------------- life cycles


def test_standard_job_life_cycle_with_timestamps(vertex, emulator):
    name = vertex.create(job(run_seconds=600))["name"]
    assert vertex.state(name) == "QUEUED"
    emulator.advance(2)  # admitted
    assert vertex.state(name) == "PENDING"
    emulator.advance(30)  # provisioned
    running = vertex.get(name)
    assert running["state"] == "JOB_STATE_RUNNING" and "startTime" in running and "endTime" not in running
    emulator.advance(600)
    done = vertex.get(name)
    assert done["state"] == "JOB_STATE_SUCCEEDED" and "error" not in done
    history = emulator.history(name)["history"]
    assert [h["state"] for h in history] == ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING",
                                             "JOB_STATE_SUCCEEDED"]


def test_standard_job_waits_queued_without_capacity_then_runs(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", standard=4)
    first = vertex.create(job(machine="a3-highgpu-4g", accelerator="NVIDIA_H100_80GB", count=4))["name"]
    second = vertex.create(job(machine="a3-highgpu-4g", accelerator="NVIDIA_H100_80GB", count=4))["name"]
    emulator.advance(40)
    assert (vertex.state(first), vertex.state(second)) == ("RUNNING", "QUEUED")
    emulator.advance(600)  # the first ends and frees its GPUs
    assert vertex.state(first) == "SUCCEEDED" and vertex.state(second) == "PENDING"


def test_user_code_failure_fails_with_exit_status(vertex, emulator):
    name = vertex.create(job(run_seconds=60, exit_code=3))["name"]
    emulator.advance(100)
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED"
    assert failed["error"]["code"] == 3 and "non-zero status of 3" in failed["error"]["message"]


def test_flex_start_gang_schedules_all_gpus_at_once(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=8)
    body = job("FLEX_START", machine="a3-highgpu-8g", accelerator="NVIDIA_H100_80GB", count=8)
    body["jobSpec"]["workerPoolSpecs"].append(copy.deepcopy(body["jobSpec"]["workerPoolSpecs"][0]))
    name = vertex.create(body)["name"]  # 2 pools x 8 GPUs = 16: never partly started
    emulator.advance(300)
    assert vertex.state(name) == "QUEUED"
    assert emulator.stats()["capacity"][0]["flexStart"] == {"total": 8, "used": 0}
    emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=16)
    assert vertex.state(name) == "PENDING"
    assert emulator.stats()["capacity"][0]["flexStart"] == {"total": 16, "used": 16}


def test_flex_start_wait_expiry_fails_with_capacity_error(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    name = vertex.create(job("FLEX_START", maxWaitDuration="1800s"))["name"]
    emulator.advance(1799)
    assert vertex.state(name) == "QUEUED"
    emulator.advance(2)
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED" and failed["error"]["code"] == 4
    assert "maxWaitDuration (1800s)" in failed["error"]["message"]
    assert failed["error"]["details"][0]["reason"] == "FLEX_START_WAIT_EXPIRED"


def test_flex_start_zero_wait_waits_forever(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    name = vertex.create(job("FLEX_START", maxWaitDuration="0s"))["name"]
    emulator.advance(30 * 86400)
    assert vertex.state(name) == "QUEUED"


def test_capacity_can_arrive_on_a_schedule(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=1, at_seconds=900)
    name = vertex.create(job("FLEX_START", maxWaitDuration="3600s"))["name"]
    emulator.advance(1000)
    running = vertex.get(name)
    assert running["state"] == "JOB_STATE_RUNNING"


def test_spot_preemptions_restart_six_times_then_stockout(vertex, emulator):
    name = vertex.create(job("SPOT", run_seconds=3600))["name"]
    emulator.advance(40)
    for restart in range(6):
        assert vertex.state(name) == "RUNNING"
        preempted = emulator.preempt(name)
        assert preempted["state"] in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")
        emulator.advance(40)
    assert emulator.history(name)["restarts"] == 6
    emulator.preempt(name)  # the seventh
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED" and failed["error"]["code"] == 8
    assert "STOCKOUT" in failed["error"]["message"]
    assert emulator.stats()["preemptions"] == 7


# ---------------------------------------------------------------------------- assumed-behaviour variants


def test_invisible_spot_restarts_stay_running_until_the_final_stockout(vertex, emulator):
    emulator.reset({"seed": 7, "speed": 1, "variants": {"spotRestarts": "invisible", "errorDetails": "message_only"}})
    name = vertex.create(job("SPOT", run_seconds=3600))["name"]
    emulator.advance(40)
    for _ in range(6):
        assert emulator.preempt(name)["state"] == "JOB_STATE_RUNNING"
        emulator.advance(40)
        assert vertex.state(name) == "RUNNING"
    emulator.preempt(name)
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED" and "STOCKOUT" in failed["error"]["message"]
    assert "details" not in failed["error"]  # message_only: code and message, no ErrorInfo
    assert [h["state"] for h in emulator.history(name)["history"]] == [
        "JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_FAILED"]


def test_invisible_restart_costs_provisioning_time_but_keeps_progress(vertex, emulator):
    emulator.reset({"seed": 7, "speed": 1, "variants": {"spotRestarts": "invisible"}})
    name = vertex.create(job("SPOT", run_seconds=100))["name"]
    emulator.advance(31 + 60)
    emulator.preempt(name)
    emulator.advance(30 + 35)  # 30 s of new VMs, then 35 of the 40 s left
    assert vertex.state(name) == "RUNNING"
    emulator.advance(10)
    assert vertex.state(name) == "SUCCEEDED"


def test_flex_start_expiry_variant_expired_has_no_error_and_no_end_time(vertex, emulator):
    emulator.reset({"seed": 7, "speed": 1, "variants": {"flexStartExpiry": "expired",
                                                         "flexStartWaitingState": "JOB_STATE_PENDING"}})
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    name = vertex.create(job("FLEX_START", maxWaitDuration="1800s"))["name"]
    assert vertex.state(name) == "PENDING"  # the waiting-state variant, from the create on
    emulator.advance(1799)
    assert vertex.state(name) == "PENDING"
    emulator.advance(2)
    expired = vertex.get(name)
    # custom_job.proto: error only for FAILED/CANCELLED; endTime only for SUCCEEDED/FAILED/CANCELLED
    assert expired["state"] == "JOB_STATE_EXPIRED" and "error" not in expired and "endTime" not in expired


def test_an_unknown_variant_is_refused(emulator):
    with pytest.raises(RuntimeError, match="spotRestarts"):
        emulator.reset({"variants": {"spotRestarts": "sometimes"}})


def test_preempted_spot_job_keeps_its_progress(vertex, emulator):
    name = vertex.create(job("SPOT", run_seconds=100))["name"]
    emulator.advance(31 + 60)  # queued 1 s, provisioning 30 s, then 60 s of its 100 s run
    emulator.preempt(name)  # re-admitted at once (capacity is free), provisioned again in 30 s
    emulator.advance(30 + 35)
    assert vertex.state(name) == "RUNNING"
    emulator.advance(10)  # 60 s done before + 40 s after the restart
    assert vertex.state(name) == "SUCCEEDED"


def test_spot_preemption_rate_is_seeded(emulator):
    def run_once() -> int:
        emulator.reset({"seed": 3, "speed": 1, "spotPreemptionsPerHour": 6})
        vertex = Vertex(emulator.url)
        names = [vertex.create(job("SPOT", run_seconds=3600))["name"] for _ in range(5)]
        emulator.advance(4 * 3600)
        assert all(vertex.get(n)["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") for n in names)
        return emulator.stats()["preemptions"]

    first = run_once()
    assert first > 0 and run_once() == first


def test_only_spot_jobs_can_be_preempted(vertex, emulator):
    name = vertex.create(job())["name"]
    emulator.advance(40)
    with pytest.raises(RuntimeError, match="not a SPOT job"):
        emulator.preempt(name)


def test_cancel_goes_through_cancelling_and_frees_capacity(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=1)
    first = vertex.create(job())["name"]
    second = vertex.create(job())["name"]
    emulator.advance(40)
    assert vertex.cancel(first) == {}
    assert vertex.state(first) == "CANCELLING"
    assert vertex.state(second) == "PENDING"  # got the freed GPU at once
    emulator.advance(5)
    cancelled = vertex.get(first)
    assert cancelled["state"] == "JOB_STATE_CANCELLED" and cancelled["error"]["code"] == 1
    assert vertex.cancel(first, expect=400)["error"]["status"] == "FAILED_PRECONDITION"


def test_delete_needs_a_terminal_job_and_returns_an_operation(vertex, emulator):
    name = vertex.create(job(run_seconds=10))["name"]
    assert vertex.call("customJobs.delete", "DELETE", name, 400)["error"]["status"] == "FAILED_PRECONDITION"
    emulator.advance(100)
    op = vertex.call("customJobs.delete", "DELETE", name)
    assert op["done"] is True
    assert vertex.call("operations.get", "GET", op["name"])["done"] is True
    assert requests.get(vertex.root + name, timeout=10).status_code == 404


def test_timeout_fails_a_job_that_runs_too_long(vertex, emulator):
    name = vertex.create(job(run_seconds=3600, timeout="600s"))["name"]
    emulator.advance(31 + 601)
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED" and "scheduling.timeout (600s)" in failed["error"]["message"]


# ---------------------------------------------------------------------------- persistent resources

POOL_BODY = {"displayName": "a100 pool", "resourcePools": [{
    "id": "a100s", "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                   "acceleratorCount": 1},
    "replicaCount": "2", "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}}]}


def _make_pool(vertex: Vertex, emulator, resource_id: str = "pool-a") -> str:
    op = vertex.call("persistentResources.create", "POST", f"{vertex.parent}/persistentResources",
                     params={"persistentResourceId": resource_id}, json=POOL_BODY)
    assert "done" not in op  # proto3 JSON: false is not printed (recorded: 26 polls with no "done")
    name = f"{vertex.parent}/persistentResources/{resource_id}"
    assert op["name"].startswith(f"{name}/operations/")  # the create's operation lives under its resource
    assert vertex.call("persistentResources.get", "GET", name)["state"] == "PROVISIONING"
    emulator.advance(61)
    done = vertex.call("operations.get", "GET", op["name"])
    assert done["done"] is True and done["response"]["state"] == "RUNNING"
    return name


def _pool_job(resource_id: str = "pool-a", replicas: int = 1, machine="a2-highgpu-1g", run_seconds=600) -> dict:
    body = job(run_seconds=run_seconds, machine=machine)
    body["jobSpec"]["persistentResourceId"] = resource_id
    del body["jobSpec"]["scheduling"]
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    body["jobSpec"]["workerPoolSpecs"].append({**copy.deepcopy(pool), "replicaCount": str(replicas)})
    return body


def test_persistent_resource_provisions_through_an_operation(vertex, emulator):
    name = _make_pool(vertex, emulator)
    listed = vertex.call("persistentResources.list", "GET", f"{vertex.parent}/persistentResources")
    assert [r["name"] for r in listed["persistentResources"]] == [name]
    assert "usedReplicaCount" not in listed["persistentResources"][0]["resourcePools"][0]  # idle: 0, not printed


def test_operations_are_served_at_v1_and_at_ui_as_googles_rest_clients_poll_them(vertex, emulator):
    # aiplatform_v1 rest_base.py: GetOperation's http rules put /ui/{name=...operations/*} first
    op = vertex.call("persistentResources.create", "POST", f"{vertex.parent}/persistentResources",
                     params={"persistentResourceId": "pool-ui"}, json=POOL_BODY)
    emulator.advance(61)
    ui = requests.get(f"{vertex.root.removesuffix('v1/')}ui/{op['name']}", timeout=10)
    assert ui.status_code == 200 and ui.json() == vertex.call("persistentResources.operations.get", "GET", op["name"])
    assert ui.json()["done"] is True and ui.json()["response"]["name"].endswith("/persistentResources/pool-ui")
    name = vertex.create(job(run_seconds=10))["name"]
    emulator.advance(100)
    deleted = vertex.call("customJobs.delete", "DELETE", name)
    assert deleted["name"].startswith(f"{vertex.parent}/operations/")
    ui_root = vertex.root.removesuffix("v1/") + "ui/"
    assert requests.get(ui_root + deleted["name"], timeout=10).json()["done"] is True
    # /ui serves operations only: a job is not there
    missing = requests.get(ui_root + name, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"


def test_job_on_busy_persistent_pool_waits_then_runs(vertex, emulator):
    name = _make_pool(vertex, emulator)
    first = vertex.create(_pool_job(replicas=1))["name"]  # 2 replicas: the whole pool
    second = vertex.create(_pool_job(replicas=1))["name"]
    emulator.advance(5)
    assert vertex.state(first) == "RUNNING" and vertex.state(second) == "QUEUED"
    used = vertex.call("persistentResources.get", "GET", name)["resourcePools"][0]["usedReplicaCount"]
    assert used == "2"
    emulator.advance(600)
    assert vertex.state(first) == "SUCCEEDED" and vertex.state(second) in ("PENDING", "RUNNING")


@pytest.mark.parametrize("declared, expect", [("hyperdisk-balanced", 200), ("pd-ssd", 400)])
def test_a3_ultra_job_without_disk_spec_fits_by_its_default_disk(vertex, emulator, declared, expect):
    # DiskSpec.boot_disk_type (machine_resources.proto): A3 Ultra defaults to hyperdisk-balanced
    body = {"displayName": "h200 pool", "resourcePools": [{
        "id": "h200s", "machineSpec": {"machineType": "a3-ultragpu-8g", "acceleratorType": "NVIDIA_H200_141GB",
                                       "acceleratorCount": 8},
        "replicaCount": "1", "diskSpec": {"bootDiskType": declared}}]}
    vertex.call("persistentResources.create", "POST", f"{vertex.parent}/persistentResources",
                params={"persistentResourceId": "h200"}, json=body)
    emulator.advance(61)
    spec = job(machine="a3-ultragpu-8g", accelerator="NVIDIA_H200_141GB", count=8)
    spec["jobSpec"]["persistentResourceId"] = "h200"
    del spec["jobSpec"]["scheduling"]
    answer = vertex.create(spec, expect=expect)
    if expect == 400:
        assert answer["error"]["status"] == "FAILED_PRECONDITION"
        assert "on hyperdisk-balanced" in answer["error"]["message"] and "h200s:" in answer["error"]["message"]
    else:
        emulator.advance(5)
        assert vertex.state(answer["name"]) == "RUNNING"


def test_persistent_mismatch_is_rejected_naming_the_pool_and_field(vertex, emulator):
    _make_pool(vertex, emulator)
    error = vertex.create(_pool_job(replicas=5), expect=400)["error"]
    assert error["status"] == "FAILED_PRECONDITION"
    assert "jobSpec.workerPoolSpecs[1].replicaCount" in error["message"] and "'a100s'" in error["message"]
    error = vertex.create(_pool_job(machine="a2-highgpu-2g") | {}, expect=400)["error"]
    assert "machineSpec" in error["message"] or "acceleratorCount" in error["message"]
    assert emulator.stats()["jobsCreated"] == {}


def test_persistent_resource_in_error_rejects_jobs(vertex, emulator):
    name = _make_pool(vertex, emulator)
    emulator.set_resource_state(name, "ERROR", "boot disk quota exhausted")
    error = vertex.create(_pool_job(), expect=400)["error"]
    assert "is ERROR" in error["message"]
    assert vertex.call("persistentResources.get", "GET", name)["error"]["message"] == "boot disk quota exhausted"


# ---------------------------------------------------------------------------- list


def test_list_filters_on_labels_state_name_and_time(vertex, emulator):
    a = vertex.create(job(labels={"team": "ml", "run": "a"}))["name"]
    b = vertex.create(job(labels={"team": "ml", "run": "b"}, run_seconds=10))["name"]
    c = vertex.create(job(labels={"team": "data"}))["name"]
    emulator.advance(100)

    def names(flt: str) -> set[str]:
        return {j["name"] for j in vertex.list(filter=flt).get("customJobs", [])}

    assert names('labels.team="ml"') == {a, b}
    assert names('labels.team="ml" AND state!="JOB_STATE_SUCCEEDED"') == {a}
    assert names('labels.run:* OR labels.team="data"') == {a, b, c}
    assert names('NOT labels.team="ml"') == {c}
    assert names('display_name="standard-job" AND labels.run="b"') == {b}
    assert names('create_time>"2000-01-01T00:00:00Z"') == {a, b, c}
    assert names('create_time<"2000-01-01T00:00:00Z"') == set()


def test_list_pages_follow_tokens_newest_first(vertex):
    created = [vertex.create(job())["name"] for _ in range(7)]
    seen, token = [], None
    while True:
        page = vertex.list(pageSize=3, **({"pageToken": token} if token else {}))
        seen += [j["name"] for j in page["customJobs"]]
        token = page.get("nextPageToken")
        if not token:
            break
        vertex.create(job())  # inserts while paging never shift the pages
    assert seen == list(reversed(created))


def test_list_rejects_a_bad_filter(vertex):
    body = vertex.call("customJobs.list", "GET", f"{vertex.parent}/customJobs", 400, params={"filter": "colour=red"})
    assert "colour" in body["error"]["message"]


# ---------------------------------------------------------------------------- faults and stats


def test_faults_are_injected_counted_and_cleared(vertex, emulator):
    emulator.set_faults(error_rate=1.0, status_codes=[503])
    response = requests.get(f"{vertex.root}{vertex.parent}/customJobs", timeout=10)
    assert response.status_code == 503 and response.json()["error"]["status"] == "UNAVAILABLE"
    emulator.clear_faults()
    assert vertex.list() == {}
    stats = emulator.stats()
    assert stats["faultsInjected"] == 1 and stats["requests"]["customJobs.list"] == 2


def test_a_job_alone_over_its_quota_is_refused_at_create(vertex, emulator):
    emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", preemptible=1)
    for strategy in ("SPOT", "FLEX_START"):  # FLEX_START draws on the preemptible quota too
        error = vertex.create(job(strategy, machine="a2-highgpu-2g", count=2), expect=429)["error"]
        assert error["status"] == "RESOURCE_EXHAUSTED"
        assert error["message"] == ("The following quota metrics exceed quota limits: "
                                    "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus")
    vertex.create(job("STANDARD", machine="a2-highgpu-2g", count=2))  # the on-demand quota is separate
    assert emulator.stats()["jobsCreated"] == {"STANDARD": 1}


def test_a_job_that_fits_its_quota_but_not_next_to_others_stays_queued_until_it_is_free(vertex, emulator):
    emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", preemptible=2)
    first = vertex.create(job("SPOT", run_seconds=100, machine="a2-highgpu-2g", count=2))["name"]
    emulator.advance(2)
    second = vertex.create(job("FLEX_START", run_seconds=100))["name"]  # accepted: 1 GPU fits a limit of 2
    emulator.advance(60)
    assert (vertex.state(first), vertex.state(second)) == ("RUNNING", "QUEUED")  # capacity is free: quota waits
    emulator.advance(100)  # the first ends and gives its quota back
    assert vertex.state(first) == "SUCCEEDED" and vertex.state(second) in ("PENDING", "RUNNING")
    emulator.advance(200)
    assert vertex.state(second) == "SUCCEEDED"


def test_quota_is_held_per_project_and_given_back_by_a_cancel(vertex, emulator):
    emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", standard=1)
    first = vertex.create(job(run_seconds=1000))["name"]
    emulator.advance(2)
    body = job(run_seconds=1000)
    other = requests.post(f"{vertex.root}projects/other-project/locations/{LOCATION}/customJobs", json=body,
                          timeout=10).json()["name"]
    waiting = vertex.create(job(run_seconds=1000))["name"]
    emulator.advance(5)
    assert [vertex.state(n) for n in (first, other, waiting)] == ["PENDING", "PENDING", "QUEUED"]
    vertex.cancel(first)
    emulator.advance(1)
    assert vertex.state(waiting) == "PENDING"


def test_raising_a_limit_admits_the_jobs_that_waited_for_it(vertex, emulator):
    metric = "custom_model_training_nvidia_a100_gpus"
    emulator.set_quota_limit(metric, 1, region=LOCATION)
    first = vertex.create(job(run_seconds=1000))["name"]
    emulator.advance(2)
    waiting = vertex.create(job(run_seconds=1000))["name"]
    emulator.advance(5)
    assert vertex.state(waiting) == "QUEUED"
    emulator.set_quota_limit(metric, -1, region=LOCATION)  # unlimited
    assert vertex.state(waiting) == "PENDING" and vertex.state(first) == "PENDING"


def test_a_standard_job_stocked_out_fails_after_the_services_retries(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0, standard_stockout_seconds=600)
    name = vertex.create(job("STANDARD"))["name"]
    spot = vertex.create(job("SPOT", run_seconds=30))["name"]  # SPOT is a separate tier: never stocked out so
    emulator.advance(599)
    assert vertex.state(name) == "QUEUED"
    emulator.advance(2)
    failed = vertex.get(name)
    assert failed["state"] == "JOB_STATE_FAILED"
    assert failed["error"] == {"code": 8, "message": f"Resources are insufficient in region: {LOCATION}"}
    assert vertex.state(spot) == "SUCCEEDED"


def test_a_scenario_file_sets_the_stockout_per_location_and_accelerator(vertex, emulator):
    emulator.reset({"seed": 7, "speed": 1, "capacity": [
        {"location": LOCATION, "acceleratorType": "NVIDIA_TESLA_A100", "standard": 0, "standardStockoutSeconds": 60}]})
    here = vertex.create(job())["name"]
    h100 = vertex.create(job(machine="a3-highgpu-1g", accelerator="NVIDIA_H100_80GB", run_seconds=1000))["name"]
    emulator.advance(61)
    assert vertex.state(here) == "FAILED"
    assert vertex.state(h100) in ("PENDING", "RUNNING")  # another accelerator: its capacity is there


def test_a_standard_job_waiting_for_quota_is_not_a_stockout(vertex, emulator):
    emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", standard=1)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard_stockout_seconds=100)
    first = vertex.create(job(run_seconds=500))["name"]
    emulator.advance(2)
    waiting = vertex.create(job(run_seconds=30))["name"]
    emulator.advance(150)
    assert vertex.state(waiting) == "QUEUED"  # capacity is there; the quota is what it waits for
    emulator.advance(400)
    assert vertex.state(first) == "SUCCEEDED" and vertex.state(waiting) in ("PENDING", "RUNNING")


def test_a_stockout_setting_reaches_jobs_already_queued_and_null_clears_it(vertex, emulator):
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0)
    name = vertex.create(job())["name"]
    emulator.advance(50)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard_stockout_seconds=100)  # counted from create
    emulator.advance(51)
    assert vertex.state(name) == "FAILED"
    requests.post(f"{emulator.url}/emulator/v1/capacity", timeout=10, json={
        "location": LOCATION, "acceleratorType": "NVIDIA_TESLA_A100", "standardStockoutSeconds": None},
    ).raise_for_status()
    again = vertex.create(job())["name"]
    emulator.advance(1000)
    assert vertex.state(again) == "QUEUED"  # queues for ever again
    bad = requests.post(f"{emulator.url}/emulator/v1/capacity", timeout=10, json={
        "location": LOCATION, "acceleratorType": "NVIDIA_TESLA_A100", "standardStockoutSeconds": -1})
    assert bad.status_code == 400 and "standardStockoutSeconds" in bad.text


def test_a_stopped_emulator_serves_again_on_the_same_port_with_its_jobs():
    """EmulatorServer.stop() then start(): an outage (connection refused), then the same
    emulator back on the same URL with the same state, as the e2e outage scenario needs."""
    from airflow_gpu_sched.emulator import EmulatorServer
    from airflow_gpu_sched.emulator.control import EmulatorControl

    with EmulatorServer() as server:
        control = EmulatorControl(server.url)
        control.reset({"seed": 1})
        url = f"{server.url}/v1/projects/p/locations/us-central1/customJobs"
        body = {"displayName": "j", "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/i"}}]}}
        created = requests.post(url, json=body, timeout=10)
        assert created.status_code == 200, created.text
        server.stop()
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=5)
        server.start()
        listed = requests.get(url, timeout=10).json()["customJobs"]
        assert [j["name"] for j in listed] == [created.json()["name"]]


def test_the_emulator_issues_a_token_and_counts_requests_that_carry_it(emulator, parent):
    """The OAuth token endpoint stand-in and the Authorization check the security e2e test
    relies on: counted, never echoed; 401 when a token is required and missing or revoked."""
    emulator.set_auth("planted-token-123", require_token=True)
    token = requests.post(f"{emulator.url}/token", data={"grant_type": "x"}, timeout=10).json()
    assert token["access_token"] == "planted-token-123" and token["token_type"] == "Bearer"
    url = f"{emulator.url}/v1/{parent}/customJobs"
    assert requests.get(url, timeout=10).status_code == 401
    wrong = requests.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and "nope" not in wrong.text
    assert requests.get(url, headers={"Authorization": "Bearer planted-token-123"}, timeout=10).status_code == 200
    emulator.set_auth("planted-token-123", reject_tokens=True)
    assert requests.get(url, headers={"Authorization": "Bearer planted-token-123"}, timeout=10).status_code == 401
    stats = emulator.stats()
    assert stats["tokensIssued"] == 1 and stats["authorizedRequests"] == 2 and stats["unknownAuthorization"] == 1
    assert "planted-token-123" not in json.dumps(stats)
    emulator.reset()
    assert requests.get(url, timeout=10).status_code == 200  # a reset drops the requirement
