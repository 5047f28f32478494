"""No secret leaves the worker, deployed: a secret planted through an Airflow Variable
(``{{ var.value.hf_token }}``) is rendered into a job's ``env`` and ``args``; it reaches the job
(the emulator's record of it), and nowhere else: not a table of the metadata database (the
trigger rows' kwargs, ``task_instance.next_kwargs`` where the triggerer's events are stored,
XCom, rendered fields), not a file under AIRFLOW_HOME (task logs, trigger logs, the components'
stdout/stderr), not an XCom as the REST API serves it. On both executors, PostgreSQL, a real
triggerer: one task waits on its job's trigger, one on a busy persistent resource's capacity
trigger (whose kwargs carry the job's spec).

The Variable comes from the components' environment (``AIRFLOW_VAR_HF_TOKEN``), so the database
holds no copy of it by design; its name is one Airflow's masker treats as sensitive, so what the
worker logs is masked, and the triggerer (which never read the Variable) is the path under test.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import requests

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.vertex.client import VertexClient
from tests.e2e.celery_deployment import CeleryDeployment, RedisServer, redis_available
from tests.e2e.harness import AirflowDeployment, PostgresCluster, _pg_versions, dags_folder, pg_available

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_security_variable"
SECRET = "hf_e2e_" + secrets.token_hex(16)
FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}
PROJECT, LOCATION = "e2e-project", "us-central1"
POOL = {"id": "a100s", "replicaCount": "1", "machineSpec": {
    "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}
EXECUTORS = [pytest.param("local", id="local"), pytest.param("celery", id="celery", marks=pytest.mark.celery)]


@pytest.fixture(scope="module", params=EXECUTORS)
def deployment(request, tmp_path_factory):
    executor = request.param
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    if executor == "celery" and not redis_available():
        pytest.skip("redis-server missing (the Celery broker): apt-get install -y redis-server")
    root = tmp_path_factory.mktemp(f"e2e-variable-{executor}")
    dags = dags_folder(root, ("_e2e_task.py", "e2e_security_variable.py"))
    with EmulatorServer() as emulator, PostgresCluster() as pg, contextlib.ExitStack() as stack:
        conn = {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn), "AIRFLOW_VAR_HF_TOKEN": SECRET}
        if executor == "celery":
            redis = stack.enter_context(RedisServer(root / "redis"))
            deployed = CeleryDeployment(root / "home", pg.url, dags, env, broker_url=redis.url)
        else:
            deployed = AirflowDeployment(root / "home", pg.url, dags, env)
        with deployed as airflow:
            airflow.emulator, airflow.pg = EmulatorControl(emulator.url), pg
            yield airflow


def _dump_db(pg: PostgresCluster) -> str:
    """Every table's rows (pg_dump --data-only), as text."""
    pg_dump = Path("/usr/lib/postgresql") / _pg_versions()[-1] / "bin" / "pg_dump"
    proc = subprocess.run([str(pg_dump), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "--data-only",
                           pg.dbname], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _xcoms(airflow: AirflowDeployment, run_id: str) -> str:
    out = []
    for ti in airflow.task_instances(DAG_ID, run_id):
        base = f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/xcomEntries"
        for entry in airflow.api("GET", base)["xcom_entries"]:
            out.append(json.dumps(airflow.api("GET", f"{base}/{entry['key']}")))
    return "\n".join(out)


def _jobs(emulator: EmulatorControl) -> list[dict]:
    response = emulator._session.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                                     timeout=10)
    response.raise_for_status()
    return response.json().get("customJobs", [])


def _trigger_kwargs_seen(airflow: AirflowDeployment, run_id: str, task_id: str, timeout: float = 600) -> None:
    """Wait until ``task_id`` deferred (its trigger row was written)."""
    deadline, ti = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            ti = {t["task_id"]: t for t in airflow.task_instances(DAG_ID, run_id)}.get(task_id)
        except requests.RequestException:  # a slow API server on a loaded machine: ask again
            ti = None
        if ti and (ti["state"] == "deferred" or ti.get("trigger")):
            return
        time.sleep(1)
    raise AssertionError(f"{task_id} never deferred: {ti}")


@pytest.mark.timeout(1800)  # a hang guard, not a speed check: a deployment starts on a shared machine
def test_a_variable_rendered_into_env_and_args_reaches_the_job_and_nothing_else(deployment):
    airflow = deployment
    airflow.emulator.reset({**FAST, "persistentResources": [
        {"project": PROJECT, "location": LOCATION, "id": "secret-pool",
         "resource": {"displayName": "secret-pool", "resourcePools": [POOL]}}]})
    # a blocker holds the pool's one replica until cancelled: on_pool defers on the capacity trigger
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=airflow.emulator.url) as client:
        blocker = client.create_custom_job({"displayName": "blocker", "jobSpec": {
            "persistentResourceId": "secret-pool", "workerPoolSpecs": [{
                "machineSpec": POOL["machineSpec"], "replicaCount": "1",
                "containerSpec": {"imageUri": "gcr.io/p/b:1", "env": [{"name": "EMULATOR_RUN_SECONDS",
                                                                        "value": "10000000"}]}}]}}).name
    run_id = airflow.trigger(DAG_ID)
    _trigger_kwargs_seen(airflow, run_id, "on_pool")
    db_while_deferred = _dump_db(airflow.pg)  # the capacity trigger's row exists only while it waits
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=airflow.emulator.url) as client:
        client.cancel_custom_job(blocker)  # the pool frees: on_pool submits its job
    state = airflow.wait(DAG_ID, run_id, timeout=300)
    assert state == "success", (f"run {state}: {airflow.why(DAG_ID, run_id)}\n{airflow.task_events(DAG_ID, run_id)}\n"
                                f"{airflow.logs()[-8000:]}")

    # the secret did reach the jobs (the grep below would otherwise prove nothing)
    ours = [j for j in _jobs(airflow.emulator) if j.get("displayName", "").startswith("e2e-variable")]
    assert len(ours) == 2, ours
    for job in ours:
        container = job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
        assert {"name": "HF_TOKEN", "value": SECRET} in container["env"] and container["args"] == [
            f"--hf-token={SECRET}"], container

    outputs = {"metadata DB (every table, while deferred)": db_while_deferred,
               "metadata DB (every table, after the run)": _dump_db(airflow.pg),
               "XCom (REST API)": _xcoms(airflow, run_id)}
    for path in sorted(p for p in airflow.home.rglob("*") if p.is_file()):
        outputs[str(path.relative_to(airflow.home))] = path.read_text(errors="replace")
    leaked = sorted(name for name, text in outputs.items() if SECRET in text)
    assert not leaked, f"the planted secret is in: {leaked}"
    # the grep looked where the secret would be: the events Airflow stored (next_kwargs), the
    # capacity trigger (its row while it waited, or the triggerer's log of it), the task logs, XCom
    everything = "\n".join(outputs.values())
    assert "Trigger fired event" in everything and "JOB_STATE_SUCCEEDED" in everything
    assert "PersistentCapacityTrigger" in db_while_deferred and "secret-pool" in everything
    assert "gpu_hours" in outputs["XCom (REST API)"]
    assert any("task_id=train" in name for name in outputs) and any("task_id=on_pool" in name for name in outputs), \
        sorted(outputs)
