"""No value of a job's env in any text the trigger or the operator writes (issue 37, part 3): a
job whose env holds secrets prints them on stdout and stderr (plain, JSON-escaped, as Python's
repr, URL-encoded, a PEM key's lines) and fails. At the wire (the emulator runs the job's command,
its output is the job's Cloud Logging entries): the trigger's log records, its event and its
kwargs; under ``dag.test()``: the task log, the TrainingJobFailedNoRetry message, XCom."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import urllib.parse
from datetime import datetime, timezone

import pytest

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.orchestration.redaction import MIN_SECRET, Redactor, env_values, forms
from airflow_gpu_sched.triggers import CustomJobTrigger
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
TOKEN = "hf_" + secrets.token_hex(12)
PASSWORD = 'pa"ss\\w0rd/é+' + secrets.token_hex(4)  # escaped differently by JSON, repr and URLs
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQ" + secrets.token_hex(8) + "\nAbCd" + secrets.token_hex(8) + \
      "\n-----END PRIVATE KEY-----"
# QUOTED: a value Vertex's error of the failed job quotes (the emulator's wording), as an error
# that quoted the job's output would
ENV = {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD, "SSH_KEY": PEM, "EPOCHS": "3",
       "QUOTED": "exited with a non-zero status"}
# stdout: plain; stderr: JSON (ASCII and not), repr, the whole environment, a URL, the key's lines
SCRIPT = """
import json, os, sys, urllib.parse
e = os.environ
print("token=" + e["HF_TOKEN"], "password=" + e["DB_PASSWORD"], flush=True)
print(e["SSH_KEY"], flush=True)
print(json.dumps({"token": e["HF_TOKEN"], "password": e["DB_PASSWORD"]}), file=sys.stderr)
print(json.dumps({"password": e["DB_PASSWORD"]}, ensure_ascii=False), file=sys.stderr)
print(repr(e["DB_PASSWORD"]), {k: e[k] for k in ("HF_TOKEN", "SSH_KEY")}, file=sys.stderr)
print("https://hub/?p=" + urllib.parse.quote(e["DB_PASSWORD"], safe=""), file=sys.stderr)
print("training failed at epoch " + e["EPOCHS"], file=sys.stderr)
print("argv", sys.argv[1:], file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture(autouse=True)
def _masker_as_it_was():
    """The triggers here register the job's env values with Airflow's masker in this process (as
    in a triggerer): put it back after each test, so that later tests' texts are not cut."""
    from airflow.sdk._shared.secrets_masker.secrets_masker import _secrets_masker

    masker = _secrets_masker()
    patterns, replacer = set(masker.patterns), masker.replacer
    yield
    masker.patterns, masker.replacer = patterns, replacer


def leaks(text: str) -> list[str]:
    """Which secrets (in any printed form, or a line of the key) ``text`` still holds."""
    return sorted({name for name, value in ENV.items() if name != "EPOCHS"
                   for form in forms(value) if form in text})


def test_every_printed_form_of_every_secret_is_cut_and_short_values_are_kept():
    cut = Redactor(ENV.values())
    printed = (f"{TOKEN} {json.dumps(PASSWORD)} {json.dumps(PASSWORD, ensure_ascii=False)} {PASSWORD!r} "
               f"{urllib.parse.quote(PASSWORD, safe='')} {urllib.parse.quote_plus(PASSWORD)} {PEM.splitlines()[1]}")
    assert not leaks(cut(printed)) and cut(printed).count("***") == 7, cut(printed)
    assert leaks(printed) == ["DB_PASSWORD", "HF_TOKEN", "SSH_KEY"]  # the check above could fail
    # Airflow's masker's rule: under MIN_SECRET characters, or "airflow", nothing is cut
    assert Redactor(["3", "true", "1234", "airflow"])("epoch 3 true 1234 airflow") == "epoch 3 true 1234 airflow"
    assert Redactor(["x" * MIN_SECRET])("a xxxxx b") == "a *** b"
    assert Redactor(["abcdef"], min_length=8)("abcdef") == "abcdef"  # a configured longer minimum
    # one pass, the longest form first: a secret holding another is cut whole
    assert Redactor(["secret", "secret-and-more"])("x secret-and-more y secret") == "x *** y ***"
    tuning = {"trialJobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": [{"name": "A", "value": TOKEN}]}}]},
              "trainingTaskInputs": {"workerPoolSpecs": [{"pythonPackageSpec": {"env": [{"name": "B",
                                                                                       "value": PASSWORD}]}}]}}
    assert env_values(tuning) == {TOKEN, PASSWORD}


@pytest.fixture
def executing(tmp_path):
    """An emulator that runs each job's command as a local process (its stdout and stderr are
    the job's INFO and ERROR entries), fast."""
    with EmulatorServer(Scenario(seed=1, speed=1, execute=True, execute_root=str(tmp_path))) as server:
        control = EmulatorControl(server.url)
        control.reset({"seed": 1, "speed": 50, "queueSeconds": 1, "provisioningSeconds": 5})
        yield server
        control.reset({})  # stops the processes


def _create(url: str, args: list[str] | None = None) -> str:
    import requests

    body = {"displayName": "prints-its-env", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "local", "command": [sys.executable, "-c", SCRIPT], "args": args or [],
                          "env": [{"name": k, "value": v} for k, v in ENV.items()]}}]}}
    response = requests.post(f"{url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", json=body, timeout=5)
    response.raise_for_status()
    return response.json()["name"]


@pytest.mark.parametrize("polling", ["batched", "per_job"])
async def test_the_triggers_log_records_and_event_hold_no_env_value(executing, capfd, monkeypatch, polling):
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": executing.url}}))
    from airflow_gpu_sched.triggers import log_tail

    log_tail._IN_MEMORY.clear()  # a position kept for an earlier test's job of the same name
    name = _create(executing.url)
    trigger = CustomJobTrigger(name, poll_interval=0.05, stream_logs=True, polling=polling)
    assert not leaks(json.dumps(trigger.serialize()))  # the kwargs (the trigger row) never carry them
    event = None
    async for fired in trigger.run():
        event = fired.payload
        break
    assert event is not None and event["status"] == "failed"
    captured = capfd.readouterr()  # the trigger's log records, as Airflow's logging renders them
    records = (captured.out + captured.err).splitlines()
    # the job's lines were written, both streams (the short value as printed), its secrets were not
    assert any("[workerpool0-0 ERROR] training failed at epoch 3" in r for r in records), records
    assert not leaks("\n".join(records)), [r for r in records if leaks(r)]
    assert any("[workerpool0-0 INFO] token=*** password=***" in r for r in records), records
    assert not leaks(json.dumps(event)) and "workerpool0-0 *** of 1" in event["message"], event
    # this process's Airflow masker took what it would in the worker (a sensitive name), not all
    from airflow.sdk._shared.secrets_masker import redact

    assert redact(f"{TOKEN} {PASSWORD}") == "*** ***"
    assert redact(ENV["QUOTED"]) == ENV["QUOTED"]


@pytest.fixture
def airflow_executing(airflow_db, executing, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": executing.url}}))
    from airflow_gpu_sched.triggers import log_tail

    log_tail._IN_MEMORY.clear()
    return executing


@pytest.mark.parametrize("deferrable", [True, False], ids=["trigger", "in-the-worker"])
def test_the_task_log_the_error_and_xcom_hold_no_env_value(airflow_executing, capfd, deferrable):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(f"prints_its_env_{deferrable}", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="local",
                            command=[sys.executable, "-c", SCRIPT], poll_interval=0.05, retries=0,
                            deferrable=deferrable, failure_log_lines=3, plan=[{"strategy": "SPOT"}], env=ENV, **A100)
    result = run_dag(dag, logical_date=START)
    assert result["train"].state == "failed"
    captured = capfd.readouterr()
    out = captured.out + captured.err  # the task log and the error, on stdout/stderr under dag.test
    assert "TrainingJobFailedNoRetry" in out and "last 3 log line(s) of workerpool0-0" in out
    assert "training failed at epoch 3" in out  # the job's lines are there, their secrets are not
    assert not leaks(out), [line for line in out.splitlines() if leaks(line)]
    assert not leaks(json.dumps(result["train"].xcoms, default=str))


def test_lines_wait_while_the_jobs_env_cannot_be_read(caplog):
    """The tail writes nothing it has not cut: with the job unreadable, the lines are held."""
    from airflow_gpu_sched.triggers.log_tail import JobLogStream
    from airflow_gpu_sched.vertex.client import VertexError

    async def unreadable():
        raise VertexError("503 Service Unavailable")

    class Trigger:
        log = logging.getLogger("held")

    stream = JobLogStream(Trigger(), f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1", unreadable,
                          ("c", None, PROJECT), 0.05, None)
    from airflow_gpu_sched.vertex.cloud_logging import LogEntry

    entry = LogEntry.model_validate({"textPayload": "token=" + TOKEN, "timestamp": "2026-01-01T00:00:00Z", "insertId": "1",
                               "severity": "INFO", "resource": {"type": "ml_job", "labels": {"job_id": "1"}},
                               "labels": {"ml.googleapis.com/task_name": "workerpool0-0"}})
    caplog.set_level(logging.INFO)
    asyncio.run(stream.write([entry]))
    said = [r.getMessage() for r in caplog.records]
    assert any("lines held back until the job's env is read" in r for r in said), said
    assert not leaks("\n".join(said)) and not any("[workerpool0-0" in r for r in said)
    assert stream.position.timestamp is None  # not moved past the held line: the next poll brings it again


ARG_SECRET = "arg_" + secrets.token_hex(12)  # masked by Airflow in the worker, in the job's args, not its env


def test_a_value_the_workers_masker_hides_is_cut_by_the_trigger_told_only_where(executing, capfd, monkeypatch):
    """A sensitive Variable rendered into ``args``: the worker's masker knows it, the triggerer's
    does not. The worker tells the trigger where in the spec it is (never what); the trigger reads
    it from the job and cuts it from the job's lines (here the job prints its argv)."""
    from airflow.sdk._shared.secrets_masker.secrets_masker import _secrets_masker
    from airflow.sdk.log import mask_secret

    from airflow_gpu_sched.operators import GpuTrainingOperator
    from airflow_gpu_sched.operators.job_logs import masked_places
    from airflow_gpu_sched.triggers import log_tail

    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": executing.url}}))
    log_tail._IN_MEMORY.clear()
    name = _create(executing.url, args=["--epochs=3", f"--hf-token={ARG_SECRET}"])
    op = GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="local",
                             plan=[{"strategy": "SPOT"}], **A100)
    _secrets_masker().reset_masker()  # what earlier tests' triggers registered in this process
    assert masked_places(op, name) == []  # the masker here knows nothing of it yet
    mask_secret(ARG_SECRET)  # as Variable.get of a sensitive name does in the worker
    places = masked_places(op, name)
    assert places == [[["jobSpec", "workerPoolSpecs", 0, "containerSpec", "args", 1], 11, 11 + len(ARG_SECRET)]]

    trigger = CustomJobTrigger(name, poll_interval=0.05, stream_logs=True, masked=places)
    serialized = json.dumps(trigger.serialize())
    assert ARG_SECRET not in serialized and '"masked": [[["jobSpec"' in serialized
    _secrets_masker().reset_masker()  # the triggerer's masker never saw it

    async def drain():
        async for fired in trigger.run():
            return fired.payload
    event = asyncio.run(drain())
    captured = capfd.readouterr()
    out = captured.out + captured.err
    assert event["status"] == "failed" and "training failed at epoch 3" in out
    assert ARG_SECRET not in out and ARG_SECRET not in json.dumps(event)
    assert "'--hf-token=***'" in out, out[-3000:]
