"""Every rpc the emulator serves, driven by our own client (raw HTTP only where the client has no
method), with the traffic recorded: every request body we send and every answer, errors
included, parses strictly into Google's proto types (tests/google_types.py). The example DAGs'
traffic is checked the same way in test_operator_dags.py."""

from __future__ import annotations

import requests

from airflow_gpu_sched.emulator.urls import ROUTES
from airflow_gpu_sched.vertex.client import VertexClient
from tests.conftest import LOCATION, PROJECT, with_a100_pool
from tests.google_types import format_violations, traffic_violations
from tests.test_emulator_job_types import job_spec, pipeline, tuning

POOL = {"displayName": "made-here", "resourcePools": [{
    "id": "l4s", "replicaCount": "1",
    "machineSpec": {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}}]}


def test_every_rpc_the_emulator_serves_speaks_googles_types(emulator):
    emulator.reset({**with_a100_pool("a100-pool"), "speed": 1})
    emulator.start_traffic()
    root = f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}"
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        job = client.create_custom_job({"displayName": "j", "labels": {"team": "ml"}, "jobSpec": job_spec("SPOT")})
        client.get_custom_job(job.name)
        client.list_custom_jobs_page(filter='labels.team="ml" AND state!="JOB_STATE_SUCCEEDED"', page_size=1)
        client.cancel_custom_job(job.name)
        emulator.advance(10)
        client.delete_custom_job(job.name)

        tune = client.create_hyperparameter_tuning_job(tuning(max_trials=2, parallel=2))
        emulator.advance(200)
        client.get_hyperparameter_tuning_job(tune.name)
        client.list_hyperparameter_tuning_jobs_page(filter='state="JOB_STATE_SUCCEEDED"')
        tune2 = client.create_hyperparameter_tuning_job(tuning(max_trials=2, parallel=1, name="cancelled"))
        client.cancel_hyperparameter_tuning_job(tune2.name)
        client.delete_hyperparameter_tuning_job(tune.name)

        train = client.create_training_pipeline(pipeline())
        emulator.advance(200)
        done = client.get_training_pipeline(train.name)
        client.list_training_pipelines_page(filter='labels.team="ml"')
        client.get_model(done.model_to_upload.name)
        client.list_models_page()
        train2 = client.create_training_pipeline(pipeline(name="cancelled"))
        client.cancel_training_pipeline(train2.name)
        client.delete_training_pipeline(train.name)

        operation = client.create_persistent_resource(POOL, "made-here")
        emulator.advance(120)
        client.get_operation(operation.name)  # done: its response is the PersistentResource
        made = client.get_persistent_resource("made-here")
        client.list_persistent_resources_page(page_size=1)
        pools = [{"id": made.resource_pools[0].id, "replicaCount": "2"}]  # our client has no patch: raw HTTP
        requests.patch(f"{root}/persistentResources/made-here", params={"updateMask": "resource_pools.replica_count"},
                       json={"resourcePools": pools}, timeout=5)
        emulator.advance(120)
        deleted = client.delete_persistent_resource("made-here")
        client.get_operation(deleted.name)  # a delete's operation lives under the location

        infos = client.list_quota_infos_page(page_size=2)
        quota_id = infos.quota_infos[0].quota_id
        requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/global/services/"
                     f"aiplatform.googleapis.com/quotaInfos/{quota_id}", timeout=5)

        # errors: 404, 400 naming a rule, 429 over quota, 403 on quota reads
        requests.get(f"{root}/customJobs/404", timeout=5)
        requests.get(f"{root}/persistentResources/none", timeout=5)
        bad = job_spec()
        del bad["workerPoolSpecs"][0]["machineSpec"]["acceleratorCount"]
        requests.post(f"{root}/customJobs", json={"displayName": "bad", "jobSpec": bad}, timeout=5)
        emulator.set_quota_limit("custom_model_training_nvidia_a100_gpus", 0, LOCATION)
        requests.post(f"{root}/customJobs", json={"displayName": "over", "jobSpec": job_spec()}, timeout=5)
        emulator.deny_quota_reads()
        requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/global/services/"
                     f"aiplatform.googleapis.com/quotaInfos", timeout=5)

    traffic = emulator.traffic()
    _assert_no_violations(traffic)
    assert {rpc for _, _, rpc in ROUTES} - {e["rpc"] for e in traffic} == set()  # every route was covered
    assert {e["status"] for e in traffic} >= {200, 400, 403, 404, 429}


def test_every_way_a_job_ends_speaks_googles_types(emulator):
    """The error of each ending the emulator models (its ErrorInfo details included), the
    resource of a persistent resource in ERROR, as Google's types."""
    emulator.start_traffic()
    flex = {**job_spec("FLEX_START"), "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "60s"}}
    slow = {**job_spec(run_seconds=3600), "scheduling": {"timeout": "100s"}}
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        names = [client.create_custom_job({"displayName": name, "jobSpec": spec}).name for name, spec in [
            ("spot", job_spec("SPOT", run_seconds=600)), ("flex", flex), ("exit", job_spec(exit_code=1)),
            ("timeout", slow)]]
        emulator.advance(40)
        for _ in range(7):  # past the service's six restarts
            emulator.preempt(names[0])
            emulator.advance(40)
        emulator.advance(600)
        ended = [client.get_custom_job(name) for name in names]
        client.create_persistent_resource(POOL, "broken")
        emulator.advance(120)
        emulator.set_resource_state(f"projects/{PROJECT}/locations/{LOCATION}/persistentResources/broken", "ERROR",
                                    "The resource could not be provisioned.")
        client.get_persistent_resource("broken")
    assert [j.state.value for j in ended] == ["JOB_STATE_FAILED"] * 4
    assert all(j.error and j.error.code in (3, 4, 8) for j in ended)
    _assert_no_violations(emulator.traffic())


def _assert_no_violations(traffic: list[dict]) -> None:
    violations = traffic_violations(traffic)
    assert violations == [], f"{len(violations)} exchanges differ from Google's types:\n" + \
        format_violations(violations)


def test_the_recorder_calls_back_while_the_clients_connection_is_still_open(emulator_server, emulator):
    """``start(on_exchange=f)``: f sees each exchange as it is recorded, and the client's TCP port
    in it is still held by the client (here this process), so a test can tell which process sent
    a call even on a connection opened and closed at once."""
    import os

    import psutil

    seen: list[tuple[str, bool]] = []

    def held_by_this_process(exchange: dict) -> None:
        port = int(exchange["client"].rsplit(":", 1)[1])
        mine = {c.laddr.port for c in psutil.Process(os.getpid()).net_connections(kind="tcp")
                if c.raddr and c.raddr.port == emulator_server.port}
        seen.append((exchange["rpc"], port in mine))

    emulator_server.traffic.start(bodies=False, on_exchange=held_by_this_process)
    try:
        with requests.Session() as session:  # a fresh connection, closed right after
            session.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5)
    finally:
        emulator_server.traffic.stop()
    assert seen == [("customJobs.list", True)]
    emulator.reset({"seed": 7, "speed": 1})
    assert emulator_server.traffic.on_exchange is None  # a reset forgets the callback
