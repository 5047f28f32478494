"""Compute Engine reservations: the emulator's compute v1 surface, the client, and RESERVATION
plan steps through dag.test() (a job on a reservation, and the plan moving on when it cannot
take the job), all over HTTP."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from airflow_gpu_sched.vertex.client import InvalidArgumentError, NotFoundError, VertexClient
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT

ZONE = f"{LOCATION}-a"
NAME = f"projects/{PROJECT}/zones/{ZONE}/reservations/a100-nightly"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
SPECIFIC = {"reservationAffinityType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": [NAME]}


def reservation(count: int = 2, machine_type: str = "a2-highgpu-1g", name: str = "a100-nightly", **extra) -> dict:
    return {"name": name, "specificReservation": {"count": str(count), "instanceProperties": {
        "machineType": machine_type, "guestAccelerators": [
            {"acceleratorType": "nvidia-tesla-a100", "acceleratorCount": 1}]}}, **extra}


def with_reservation(count: int = 2, **kw) -> dict:
    return {"reservations": [{"project": PROJECT, "zone": ZONE, "reservation": reservation(count, **kw)}]}


def client(emulator) -> VertexClient:
    return VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)


def in_use(emulator) -> int:
    return int(client(emulator).get_reservation(NAME).specific_reservation.in_use_count or 0)


def job_body(affinity: dict | None, replicas: int = 1, run_seconds: int = 60) -> dict:
    machine = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    if affinity:
        machine["reservationAffinity"] = affinity
    container = {"imageUri": "gcr.io/p/t:1", "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)}]}
    pools = [{"machineSpec": machine, "replicaCount": "1", "containerSpec": container}]
    if replicas > 1:  # the first pool is the primary: further replicas are workers
        pools.append({"machineSpec": machine, "replicaCount": str(replicas - 1), "containerSpec": container})
    return {"displayName": "j", "jobSpec": {"workerPoolSpecs": pools}}


# ----------------------------------------------------------------------------- the compute surface


def test_reservations_insert_get_list_answer_in_computes_shapes(emulator):
    c = client(emulator)
    op = c.insert_reservation(ZONE, reservation(3))
    assert op.kind == "compute#operation" and op.operation_type == "insert" and op.status == "DONE"
    assert op.target_link.endswith(NAME) and op.zone.endswith(f"/zones/{ZONE}")
    polled = requests.get(f"{emulator.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations/{op.name}",
                          timeout=5).json()
    assert polled["status"] == "DONE" and polled["targetLink"] == op.target_link
    got = c.get_reservation(NAME)
    assert (got.kind, got.name, got.status, got.zone_name) == ("compute#reservation", "a100-nightly", "READY", ZONE)
    raw = requests.get(f"{emulator.url}/compute/v1/{NAME}", timeout=5).json()
    assert raw["specificReservation"]["count"] == "3" and raw["specificReservation"]["inUseCount"] == "0"
    assert raw["selfLink"] == f"https://www.googleapis.com/compute/v1/{NAME}"
    c.insert_reservation(ZONE, reservation(1, name="second"))
    first = c.list_reservations_page(ZONE, max_results=1)
    assert first.kind == "compute#reservationList" and len(first.items) == 1 and first.next_page_token
    rest = c.list_reservations_page(ZONE, page_token=first.next_page_token)
    assert {r.name for r in first.items + rest.items} == {"a100-nightly", "second"} and not rest.next_page_token
    assert c.list_reservations_page("us-east4-b").items == []


def test_compute_refuses_what_computes_front_end_refuses(emulator):
    c = client(emulator)
    with pytest.raises(InvalidArgumentError, match='Unknown name "colour" at \'reservation_resource\''):
        c.insert_reservation(ZONE, {**reservation(), "colour": "red"})
    with pytest.raises(InvalidArgumentError, match="reservation_resource.specific_reservation.count"):
        c.insert_reservation(ZONE, reservation(count="lots"))  # type: ignore[arg-type]
    answer = requests.get(f"{emulator.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/reservations?pageSize=3",
                          timeout=5)
    assert answer.status_code == 400 and 'Unknown name "pageSize"' in answer.json()["error"]["message"]
    with pytest.raises(NotFoundError, match="was not found"):
        c.get_reservation(NAME)
    c.insert_reservation(ZONE, reservation())
    again = requests.post(f"{emulator.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/reservations",
                          json=reservation(), timeout=5)
    assert again.status_code == 409 and again.json()["error"]["errors"][0]["reason"] == "alreadyExists"


async def test_the_async_client_reads_reservations_through_faults(emulator):
    from airflow_gpu_sched.vertex.client import AsyncVertexClient, RetryPolicy

    emulator.reset({"seed": 7, "speed": 1, **with_reservation(2)})
    emulator.set_faults(error_rate=0.5, status_codes=[429, 503])
    aclient = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url,
                                retry=RetryPolicy(initial=0.01, maximum=0.05, deadline=30))
    for _ in range(5):
        got = await aclient.get_reservation(NAME)
        assert got.specific_reservation.count == 2 and got.free == 2
    page = await aclient.list_reservations_page(ZONE)
    emulator.clear_faults()
    assert [r.name for r in page.items] == ["a100-nightly"] and emulator.stats()["faultsInjected"] > 0


@pytest.mark.parametrize("endpoint, root", [
    (None, "https://compute.googleapis.com/compute/v1/"),
    ("us-central1-aiplatform.googleapis.com", "https://compute.googleapis.com/compute/v1/"),
    ("http://127.0.0.1:8765", "http://127.0.0.1:8765/compute/v1/"),
    ("http://127.0.0.1:8765/v1/", "http://127.0.0.1:8765/compute/v1/"),
])
def test_compute_calls_go_to_compute_or_to_the_emulators_host(endpoint, root):
    from airflow_gpu_sched.vertex.client import VertexApi

    api = VertexApi(endpoint)
    assert api.url(api.get_reservation(NAME)) == root + NAME
    assert api.url(api.list_reservations(PROJECT, ZONE, max_results=5)) == \
        f"{root}projects/{PROJECT}/zones/{ZONE}/reservations?maxResults=5"


def test_the_compute_table_is_what_the_discovery_document_gives():
    from airflow_gpu_sched.vertex import compute_schema

    assert compute_schema.load() == _regenerated(), (
        "regenerate: python -m airflow_gpu_sched.vertex.compute_schema --regenerate")


def test_the_compute_query_parameters_are_the_discovery_documents():
    """Each served compute method takes exactly the query parameters compute v1 documents
    (reservations.list: no returnPartialSuccess in v1), and refuses another."""
    from airflow_gpu_sched.emulator.reservations import QUERY_PARAMETERS
    from airflow_gpu_sched.vertex import compute_schema

    document = json.loads(Path(compute_schema._discovery_path()).read_text())
    methods = {**{f"reservations.{k}": v for k, v in document["resources"]["reservations"]["methods"].items()},
               **{f"zoneOperations.{k}": v for k, v in document["resources"]["zoneOperations"]["methods"].items()}}
    for rpc, params in QUERY_PARAMETERS.items():
        documented = {n for n, p in methods[rpc]["parameters"].items() if p["location"] == "query"}
        assert set(params) == documented, rpc
    assert "returnPartialSuccess" not in QUERY_PARAMETERS["reservations.list"]


def test_reservations_list_refuses_return_partial_success(emulator):
    url = f"{emulator.url}/compute/v1/projects/{PROJECT}/zones/us-central1-a/reservations"
    response = requests.get(url, params={"returnPartialSuccess": "true"}, timeout=10)
    assert response.status_code == 400 and "returnPartialSuccess" in response.json()["error"]["message"]
    assert requests.get(url, params={"maxResults": "5"}, timeout=10).status_code == 200


def _regenerated() -> dict:
    from airflow_gpu_sched.vertex import compute_schema
    from airflow_gpu_sched.vertex.request_schema import dumps

    return json.loads(dumps(compute_schema.generate()))


def test_jobs_naming_a_reservation_hold_its_vms_while_they_run(emulator):
    emulator.reset({"seed": 7, "speed": 1, **with_reservation(2)})
    c = client(emulator)
    job = c.create_custom_job(job_body(SPECIFIC, replicas=2, run_seconds=60))
    emulator.advance(2)
    assert in_use(emulator) == 2  # admitted: one VM per replica
    emulator.advance(40)
    assert c.get_custom_job(job.name).state.value == "JOB_STATE_RUNNING" and in_use(emulator) == 2
    emulator.advance(60)
    assert c.get_custom_job(job.name).state.value == "JOB_STATE_SUCCEEDED" and in_use(emulator) == 0


def test_any_reservation_takes_a_matching_one_else_on_demand(emulator):
    emulator.reset({"seed": 7, "speed": 1, **with_reservation(1)})
    c = client(emulator)
    c.insert_reservation(ZONE, reservation(5, name="only-by-name", specificReservationRequired=True))
    first = c.create_custom_job(job_body({"reservationAffinityType": "ANY_RESERVATION"}, run_seconds=600))
    second = c.create_custom_job(job_body({"reservationAffinityType": 2}, run_seconds=600))  # enum as a number
    emulator.advance(50)
    assert in_use(emulator) == 1  # the first holds the open reservation's one VM
    only = c.get_reservation(f"projects/{PROJECT}/zones/{ZONE}/reservations/only-by-name")
    assert only.specific_reservation.in_use_count == 0  # specificReservationRequired: not for ANY
    assert {c.get_custom_job(j.name).state.value for j in (first, second)} == {"JOB_STATE_RUNNING"}  # on-demand


def test_a_job_whose_reservation_cannot_hold_it_is_refused_at_create(emulator):
    emulator.reset({"seed": 7, "speed": 1, **with_reservation(2, machine_type="a2-highgpu-2g")})
    with pytest.raises(Exception, match="a2-highgpu-2g"):
        client(emulator).create_custom_job(job_body(SPECIFIC))
    other = {**SPECIFIC, "values": [f"projects/{PROJECT}/zones/{ZONE}/reservations/nope"]}
    with pytest.raises(Exception, match="does not exist"):
        client(emulator).create_custom_job(job_body(other))


@pytest.mark.parametrize("variant", ["queued", "failed"])
def test_a_full_reservation_queues_or_fails_the_job_by_the_variant(emulator, variant):
    emulator.reset({"seed": 7, "speed": 1, "variants": {"reservationFull": variant}, **with_reservation(1)})
    c = client(emulator)
    holder = c.create_custom_job(job_body(SPECIFIC, run_seconds=100))
    emulator.advance(2)
    waiting = c.create_custom_job(job_body(SPECIFIC, run_seconds=10))
    emulator.advance(5)
    late = c.get_custom_job(waiting.name)
    if variant == "failed":
        assert late.state.value == "JOB_STATE_FAILED" and "insufficient in reservation" in late.error.message
        assert late.error.code == 8
    else:
        assert late.state.value == "JOB_STATE_QUEUED"
        emulator.advance(200)  # the holder ends: its VM goes to the waiting job
        assert c.get_custom_job(holder.name).state.value == "JOB_STATE_SUCCEEDED"
        assert c.get_custom_job(waiting.name).state.value in ("JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED")


def test_googles_sdk_round_trips_a_custom_job_with_a_reservation_affinity(emulator):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1 as v1

    emulator.reset({"seed": 7, "speed": 1, **with_reservation(2)})
    jobs = v1.JobServiceClient(transport="rest", credentials=AnonymousCredentials(),
                               client_options={"api_endpoint": emulator.url})
    affinity = v1.ReservationAffinity(reservation_affinity_type=v1.ReservationAffinity.Type.SPECIFIC_RESERVATION,
                                      key="compute.googleapis.com/reservation-name", values=[NAME])
    machine = v1.MachineSpec(machine_type="a2-highgpu-1g", accelerator_type=v1.AcceleratorType.NVIDIA_TESLA_A100,
                             accelerator_count=1, reservation_affinity=affinity)
    pool = v1.WorkerPoolSpec(machine_spec=machine, replica_count=1,
                             container_spec=v1.ContainerSpec(image_uri="gcr.io/p/t:1"))
    created = jobs.create_custom_job(parent=f"projects/{PROJECT}/locations/{LOCATION}", custom_job=v1.CustomJob(
        display_name="sdk-reserved", job_spec=v1.CustomJobSpec(worker_pool_specs=[pool])))
    got = jobs.get_custom_job(name=created.name)
    assert got.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity == affinity
    emulator.advance(2)
    assert in_use(emulator) == 1


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("reservation_value, location, message", [
    ("my-reservation", None, "is not a reservation: give 'ANY' or its full name"),
    (f"projects/{PROJECT}/zones/us-east4-b/reservations/r", None, "is in zone us-east4-b (region us-east4)"),
    (f"projects/{PROJECT}/zones/us-east4-b/reservations/r", [LOCATION], "not in us-central1"),
])
def test_a_bad_reservation_fails_when_the_dag_is_parsed_naming_the_field(reservation_value, location, message):
    from airflow_gpu_sched.operators import GpuTrainingOperator
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    step = {"strategy": "RESERVATION", "reservation": reservation_value}
    if location:
        step["locations"] = location
    with pytest.raises(InvalidTrainingSpec, match="plan\\[0\\].reservation") as caught:
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                            plan=[step], **A100)
    assert message in str(caught.value)


# ----------------------------------------------------------------------------- through Airflow


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def _train(plan: list, **kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    shape = {} if "worker_pool_specs" in kw else {"image_uri": "gcr.io/p/t:1", **A100}
    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, poll_interval=0.02,
                               plan=plan, **shape, **kw)


def _watch_in_use(emulator, stop: threading.Event, seen: list[int]) -> threading.Thread:
    def watch():
        for _ in range(3000):  # bounded: at most ~60 s
            if stop.is_set():
                return
            seen.append(in_use(emulator))
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_reservation_step_runs_its_job_on_the_reservation(airflow):
    from airflow.sdk import DAG

    airflow.reset({**FAST, **with_reservation(2)})
    with DAG("on_reservation", schedule=None, start_date=START, params={"reservation": NAME}) as dag:
        _train([{"strategy": "RESERVATION", "reservation": "{{ params.reservation }}"}, {"strategy": "STANDARD"}],
               env={"EMULATOR_RUN_SECONDS": "60"})
    stop, seen = threading.Event(), []
    watcher = _watch_in_use(airflow, stop, seen)
    try:
        result = run_dag(dag, logical_date=START)
    finally:
        stop.set()
        watcher.join()
    assert result.state == "success"
    out = result["train"].return_value
    assert [a["strategy"] for a in out["attempts"]] == ["RESERVATION"] and out["state"] == "JOB_STATE_SUCCEEDED"
    job = requests.get(f"{airflow.url}/v1/{out['job_name']}", timeout=5).json()
    assert job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"] == SPECIFIC
    assert "strategy" not in job["jobSpec"].get("scheduling", {})  # on-demand VMs of the reservation
    assert max(seen) == 1 and in_use(airflow) == 0  # held while it ran, given back when it ended


def _blocker(emulator, replicas: int = 1) -> str:
    """Another consumer holding the reservation's VMs (a long job on it)."""
    job = client(emulator).create_custom_job(job_body(SPECIFIC, replicas=replicas, run_seconds=100_000))
    for _ in range(500):
        if in_use(emulator) >= replicas:
            return job.name
        time.sleep(0.01)
    raise AssertionError("the blocker never took the reservation")


@pytest.mark.parametrize("setting, why", [
    ("full", "0 of 1 VMs free (1 in use), the job needs 1"),
    ("too-small", "1 of 1 VMs free (0 in use), the job needs 2"),
    ("other-machine", "the reservation holds a2-highgpu-2g"),
    ("missing", "does not exist"),
])
def test_the_plan_moves_on_when_the_reservation_cannot_take_the_job_naming_why(airflow, setting, why):
    from airflow.sdk import DAG

    reservations = {} if setting == "missing" else with_reservation(
        1, machine_type="a2-highgpu-2g" if setting == "other-machine" else "a2-highgpu-1g")
    airflow.reset({**FAST, **reservations})
    blocker = _blocker(airflow) if setting == "full" else None
    with DAG(f"reservation_{setting.replace('-', '_')}", schedule=None, start_date=START) as dag:
        pools = {"worker_pool_specs": job_body(None, replicas=2)["jobSpec"]["workerPoolSpecs"]} \
            if setting == "too-small" else {}
        _train([{"strategy": "RESERVATION", "reservation": NAME}, {"strategy": "STANDARD"}], **pools)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    first, second = result["train"].return_value["attempts"]
    assert (first["strategy"], first["state"], first["job_name"]) == ("RESERVATION", "RESERVATION_UNAVAILABLE", None)
    assert why in first["error"]
    assert second["strategy"] == "STANDARD" and second["state"] == "JOB_STATE_SUCCEEDED"
    job = requests.get(f"{airflow.url}/v1/{second['job_name']}", timeout=5).json()
    assert "reservationAffinity" not in job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert airflow.stats()["jobsCreated"] == {"STANDARD": 2 if blocker else 1}
    if blocker:
        client(airflow).cancel_custom_job(blocker)


def test_vms_taken_between_the_preflight_and_the_create_move_the_plan_on_under_each_variant(airflow_db,
                                                                                          variant_emulator,
                                                                                          monkeypatch):
    """Another consumer takes the last VM after the preflight read it free: the job waits past its
    capacity_wait_timeout ("queued") or fails for resources ("failed"); either way the plan moves on."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator, vertex_calls

    emulator = variant_emulator
    read = vertex_calls.read_reservation

    def read_then_fill(op, context, action):
        """Fault injection: the reservation fills up right after the preflight's read (the
        gateway's read is the patch point since the preflight reads moved there)."""
        event = read(op, context, action)
        _blocker(emulator)
        return event

    monkeypatch.setattr(vertex_calls, "read_reservation", read_then_fill)
    RacedForTheVm = GpuTrainingOperator

    full = emulator.scenario["variants"].get("reservationFull", "queued")
    emulator.reset({**emulator.scenario, **with_reservation(1)})
    with DAG("raced_for_the_vm", schedule=None, start_date=START) as dag:
        RacedForTheVm(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                      poll_interval=0.02, plan=[
                          {"strategy": "RESERVATION", "reservation": NAME, "capacity_wait_timeout": "1s"},
                          {"strategy": "STANDARD"}], **A100)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    first, second = result["train"].return_value["attempts"]
    assert first["strategy"] == "RESERVATION" and first["job_name"] and second["strategy"] == "STANDARD"
    assert first["state"] == ("CAPACITY_TIMEOUT" if full == "queued" else "JOB_STATE_FAILED"), first


def test_an_any_reservation_step_submits_at_once_and_vertex_picks_the_reservation(airflow):
    from airflow.sdk import DAG

    airflow.reset({**FAST, **with_reservation(1)})
    with DAG("any_reservation", schedule=None, start_date=START) as dag:
        _train([{"strategy": "RESERVATION", "reservation": "ANY"}], env={"EMULATOR_RUN_SECONDS": "60"})
    stop, seen = threading.Event(), []
    watcher = _watch_in_use(airflow, stop, seen)
    try:
        result = run_dag(dag, logical_date=START)
    finally:
        stop.set()
        watcher.join()
    assert result.state == "success"
    out = result["train"].return_value
    job = requests.get(f"{airflow.url}/v1/{out['job_name']}", timeout=5).json()
    assert job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"] == {
        "reservationAffinityType": "ANY_RESERVATION"}
    assert max(seen) == 1 and in_use(airflow) == 0
    assert airflow.stats()["requests"]["reservations.get"] == len(seen) + 1  # the watcher's and this one: no preflight
