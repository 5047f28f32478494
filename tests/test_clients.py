"""Sync and async clients at the wire, against the emulator: calls, errors, retries, faults."""

from __future__ import annotations

import socket

import pytest

from airflow_gpu_sched.vertex.client import (
    AmbiguousCreateError,
    AsyncVertexClient,
    InvalidArgumentError,
    NotFoundError,
    RetryPolicy,
    UnavailableError,
    VertexClient,
    VertexTransportError,
)
from airflow_gpu_sched.vertex.client.aio import shared_http_client
from airflow_gpu_sched.vertex.enums import JobState, Strategy
from airflow_gpu_sched.vertex.rules import SpecError
from tests.conftest import LOCATION, PROJECT, load_seed

FAST_RETRY = RetryPolicy(initial=0.01, maximum=0.05, deadline=20.0)


@pytest.fixture
def client(emulator) -> VertexClient:
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY) as c:
        yield c


@pytest.fixture
def aclient(emulator) -> AsyncVertexClient:
    return AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY)


def _job(i: int = 0, strategy: str = "FLEX_START", **labels) -> dict:
    body = load_seed("seed_000_flex_start.json")
    body["displayName"] = f"job-{i}"
    body["labels"] = {"team": "ml", **labels}
    body["jobSpec"]["scheduling"]["strategy"] = strategy
    return body


def test_sync_client_full_round(client, emulator):
    created = client.create_custom_job(_job())
    assert created.state is JobState.JOB_STATE_PENDING and created.job_spec.strategy is Strategy.FLEX_START
    assert client.get_custom_job(created.name).state is JobState.JOB_STATE_QUEUED  # after the create's PENDING
    client.cancel_custom_job(created.name)
    emulator.advance(5)
    assert client.get_custom_job(created.name).state is JobState.JOB_STATE_CANCELLED
    op = client.delete_custom_job(created.name)
    assert op.done is True
    with pytest.raises(NotFoundError) as raised:
        client.get_custom_job(created.name)
    assert raised.value.status_code == 404 and raised.value.rpc_status == "NOT_FOUND"


def test_list_follows_page_tokens_with_a_label_filter(client):
    names = {client.create_custom_job(_job(i, run=str(i % 2))).name for i in range(7)}
    odd = list(client.list_custom_jobs(filter='labels.run="1"', page_size=2))
    assert len(odd) == 3 and {j.name for j in odd} < names
    assert {j.name for j in client.list_custom_jobs(page_size=3)} == names


def test_bad_spec_never_reaches_the_wire(client, emulator):
    body = _job()
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_T4"
    with pytest.raises(SpecError, match=r"workerPoolSpecs\[0\]\.machineSpec\.acceleratorType"):
        client.create_custom_job(body)
    assert emulator.stats()["requests"] == {}


def test_server_side_rejection_carries_field_violations(client, emulator):
    # A persistent resource that does not exist passes the local rules but not the service.
    body = _job(strategy="STANDARD")
    body["jobSpec"]["persistentResourceId"] = "no-such-pool"
    with pytest.raises(InvalidArgumentError) as raised:
        client.create_custom_job(body)
    assert raised.value.rpc_status == "FAILED_PRECONDITION" and "no-such-pool" in raised.value.message


@pytest.mark.parametrize("codes", [[429], [503], [429, 503]], ids=["429", "503", "mixed"])
def test_sync_reads_survive_injected_faults_and_the_emulator_counts_retries(client, emulator, codes):
    name = client.create_custom_job(_job()).name
    emulator.set_faults(error_rate=0.5, status_codes=codes, latency_seconds=0.01)
    for _ in range(20):
        assert client.get_custom_job(name).name == name
    assert len(list(client.list_custom_jobs(page_size=1))) == 1
    stats = emulator.stats()
    assert stats["faultsInjected"] > 0
    # every injected fault was retried: requests = successes + faults
    assert stats["requests"]["customJobs.get"] + stats["requests"]["customJobs.list"] == 21 + stats["faultsInjected"]


def test_create_retries_429_and_makes_exactly_one_job(client, emulator):
    emulator.set_faults(error_rate=0.6, status_codes=[429])
    for i in range(5):
        client.create_custom_job(_job(i))
    stats = emulator.stats()
    assert stats["jobsCreated"] == {"FLEX_START": 5}
    assert stats["requests"]["customJobs.create"] == 5 + stats["faultsInjected"]


def test_create_hit_by_503_is_ambiguous_not_retried(client, emulator):
    emulator.set_faults(error_rate=1.0, status_codes=[503])
    with pytest.raises(AmbiguousCreateError) as raised:
        client.create_custom_job(_job())
    assert isinstance(raised.value.cause, UnavailableError)
    assert emulator.stats()["requests"]["customJobs.create"] == 1


def test_retries_stop_at_the_deadline(emulator):
    emulator.set_faults(error_rate=1.0, status_codes=[503])
    policy = RetryPolicy(initial=0.01, maximum=0.02, deadline=0.3)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url, retry=policy) as client:
        with pytest.raises(UnavailableError):
            client.get_custom_job(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1")
    assert emulator.stats()["requests"]["customJobs.get"] > 2


def test_connection_refused_is_a_transport_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        policy = RetryPolicy(initial=0.01, maximum=0.02, deadline=0.2)
        with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=f"http://127.0.0.1:{port}",
                          retry=policy) as client:
            with pytest.raises(VertexTransportError) as raised:
                client.get_custom_job(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1")
    assert raised.value.kind == "connect"


def test_persistent_resources_and_operations(client, emulator):
    emulator.reset({"speed": 1, "resourceProvisioningSeconds": 0.3})
    op = client.create_persistent_resource({"resourcePools": [{
        "id": "a100s", "replicaCount": "2", "machineSpec": {
            "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}]},
        "pool-a")
    assert op.done is False
    done = client.wait_operation(op.name, timeout=10, poll=0.1)
    assert done.done and done.response["state"] == "RUNNING"
    resource = client.get_persistent_resource("pool-a")
    assert resource.resource_pools[0].capacity == 2 and resource.resource_pools[0].free_replicas == 2
    assert [r.name for r in client.list_persistent_resources()] == [resource.name]
    assert client.delete_persistent_resource("pool-a").done is True


async def test_async_client_round_and_faults(aclient, emulator):
    created = await aclient.create_custom_job(_job())
    emulator.set_faults(error_rate=0.5, status_codes=[429, 503], latency_seconds=0.005)
    for _ in range(10):
        job = await aclient.get_custom_job(created.name)
        assert job.name == created.name
    names = [j.name async for j in aclient.list_custom_jobs(filter='labels.team="ml"', page_size=1)]
    assert names == [created.name]
    emulator.clear_faults()
    await aclient.cancel_custom_job(created.name)
    assert (await aclient.get_custom_job(created.name)).state is JobState.JOB_STATE_CANCELLING
    stats = emulator.stats()
    assert stats["faultsInjected"] > 0
    answered = stats["requests"]["customJobs.get"] + stats["requests"]["customJobs.list"]
    assert answered == 11 + 1 + stats["faultsInjected"]  # 11 gets and 1 list page succeeded


async def test_async_clients_in_one_loop_share_one_connection_pool(emulator):
    first = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)
    second = AsyncVertexClient(location="us-east4", project=PROJECT, api_endpoint=emulator.url)
    for _ in range(3):
        await first.list_custom_jobs_page()
        await second.list_custom_jobs_page()
    pool = shared_http_client()._transport._pool  # httpcore's pool behind the shared httpx client
    assert len(pool.connections) == 1  # six sequential calls from two clients, one keep-alive connection
