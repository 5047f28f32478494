"""A job that prints its env's secret, deployed (issue 37, part 3): a Variable
(``AIRFLOW_VAR_HF_TOKEN``, a name Airflow's masker treats as sensitive) rendered into the job's
``env`` and ``args``; the emulator runs the job's command (``--execute``), which prints the secret on stdout
and stderr (plain, JSON, repr, its argv) while it runs and as it fails. A second Variable
(``AIRFLOW_VAR_API_SECRET``) is rendered into ``args`` only: the worker's masker hides it, and the
trigger is told where in the spec, never what. A real triggerer tails the lines (it never read the
Variables); the worker reads the failure's last lines. The secret must be in no
file under AIRFLOW_HOME (the trigger's log file, the task log, the components' stdout/stderr), no
table of the metadata database, no XCom the REST API serves; the lines themselves must be there.
"""

from __future__ import annotations

import json
import secrets

import pytest

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, dags_folder, pg_available
from tests.e2e.test_secret_variable import FAST, PROJECT, _dump_db, _jobs

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_security_printed"
SECRET = "hf_printed_" + secrets.token_hex(16)
ARG_SECRET = "api_printed_" + secrets.token_hex(16)  # a second Variable, rendered into args only


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    root = tmp_path_factory.mktemp("e2e-printed")
    dags = dags_folder(root, ("_e2e_task.py", "e2e_security_printed.py"))
    # the emulator's record of the job's output (its "Cloud Logging") is outside AIRFLOW_HOME
    scenario = Scenario(execute=True, execute_root=str(root / "vertex"))
    with EmulatorServer(scenario) as emulator, PostgresCluster() as pg:
        conn = {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": emulator.url}}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(conn), "AIRFLOW_VAR_HF_TOKEN": SECRET,
               "AIRFLOW_VAR_API_SECRET": ARG_SECRET}
        with AirflowDeployment(root / "home", pg.url, dags, env) as airflow:
            airflow.emulator, airflow.pg = EmulatorControl(emulator.url), pg
            yield airflow
            airflow.emulator.reset({})  # stops the job processes


def _xcoms(airflow: AirflowDeployment, run_id: str) -> str:
    out = []
    for ti in airflow.task_instances(DAG_ID, run_id):
        base = f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/xcomEntries"
        for entry in airflow.api("GET", base)["xcom_entries"]:
            out.append(json.dumps(airflow.api("GET", f"{base}/{entry['key']}")))
    return "\n".join(out)


@pytest.mark.timeout(1800)  # a hang guard, not a speed check: a deployment starts on a shared machine
def test_a_secret_the_job_prints_on_both_streams_reaches_no_log(deployment):
    airflow = deployment
    airflow.emulator.reset(FAST)
    run_id = airflow.trigger(DAG_ID)
    state = airflow.wait(DAG_ID, run_id, timeout=300)
    assert state == "failed", f"run {state}: {airflow.why(DAG_ID, run_id)}\n{airflow.logs()[-8000:]}"

    # the secret did reach the job (the grep below would otherwise prove nothing)
    ours = [j for j in _jobs(airflow.emulator) if j.get("displayName") == "e2e-printed"]
    assert len(ours) == 1 and ours[0]["state"] == "JOB_STATE_FAILED", ours
    assert {"name": "HF_TOKEN", "value": SECRET} in ours[0]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]

    outputs = {"metadata DB (every table)": _dump_db(airflow.pg), "XCom (REST API)": _xcoms(airflow, run_id)}
    for path in sorted(p for p in airflow.home.rglob("*") if p.is_file()):
        outputs[str(path.relative_to(airflow.home))] = path.read_text(errors="replace")
    assert ours[0]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == [f"--api-secret={ARG_SECRET}"]
    forms = {SECRET, json.dumps(SECRET)[1:-1], repr(SECRET), ARG_SECRET}
    leaked = sorted(name for name, text in outputs.items() if any(f in text for f in forms))
    assert not leaked, f"the secret the job printed is in: {leaked}"

    # the grep looked where the lines are: the trigger's log file has the job's lines from both
    # streams, cut; the task log has the failure's last lines and the error
    triggers = {name: text for name, text in outputs.items() if ".log.trigger." in name and "task_id=train" in name}
    assert triggers, sorted(outputs)
    tailed = "\n".join(triggers.values())
    assert "[workerpool0-0 INFO] starting with token=***" in tailed, tailed[-4000:]
    assert '[workerpool0-0 ERROR] {\\"hf_token\\": \\"***\\"}' in tailed or \
        '[workerpool0-0 ERROR] {"hf_token": "***"}' in tailed, tailed[-4000:]
    task_logs = "\n".join(text for name, text in outputs.items() if "task_id=train" in name and ".trigger." not in name)
    assert "TrainingJobFailedNoRetry" in task_logs and "last 3 log line(s) of workerpool0-0" in task_logs
    assert "training failed at epoch 3" in task_logs and "token=***" in task_logs
    # the Variable in args (not in env): the worker's masker hid it; the trigger was told where
    assert "[workerpool0-0 ERROR] argv ['--api-secret=***']" in tailed, tailed[-4000:]
