"""OpenLineage: the provider's listener, configured with openlineage-python's file transport,
records the COMPLETE event of a training pipeline task run by ``dag.test()`` against the
emulator; its inputs, outputs and ``gpuTraining`` run facet come from
``get_openlineage_facets_on_complete``.

The OpenLineage plugin decides at import whether it is enabled, so the DAG runs in a child
process with its own Airflow home and ``[openlineage] transport`` set (as a deployment sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest
from datetime import datetime, timezone
from pathlib import Path

from tests.conftest import LOCATION, PROJECT

ROOT = Path(__file__).parent.parent
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SERVING = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-gpu.2-4:latest"
PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 2.0}}


def _dag():
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import FlexStartTrainingOperator

    with DAG("lineage_nightly", schedule=None, start_date=START) as dag:
        FlexStartTrainingOperator(
            task_id="train_and_register", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
            job_type="training_pipeline", model_display_name="nightly-model", model_serving_image_uri=SERVING,
            max_wait_duration="1h", prices=PRICES, poll_interval=0.02,
            base_output_dir="gs://bucket/nightly/{{ ds_nodash }}",
            args=["--data=gs://bucket/data/{{ ds }}/train.jsonl", "--steps=10", "gs://bucket/vocab/words.txt"])
    return dag


def _child(home: str, out: str) -> None:
    """In the child process: a fresh Airflow home, the DAG through dag.test(), its result written
    to ``out`` (not stdout: the listener's process-pool worker logs there at the same moment, and
    a pipe's writes from two processes interleave mid-line)."""
    from importlib.metadata import distributions

    from tests.airflow_harness import configure_airflow_home, run_dag

    configure_airflow_home(home)
    result = run_dag(_dag(), logical_date=START)
    copies = [str(d.locate_file("")) for d in distributions(name="airflow-gpu-sched")]
    Path(out).write_text(json.dumps({"state": result.state, "training": result["train_and_register"].return_value,
                                     "distributions": copies}))


# A hang guard only: alone the child takes ~20 s, on this 2-core machine loaded by other test runs
# it took up to 300 s (the first task's in-process Execution API build alone took 90 s)
CHILD_TIMEOUT = 1200


# It was a non-strict xfail twice. First cause: the child printed its result on stdout, where the
# listener's process-pool worker logs at the same moment (the lines interleaved); the result now
# goes through a file. Second cause (the task's events missing, the DAG's COMPLETE present, on every
# run once test_wheel had run in the checkout): test_wheel's in-tree build left
# airflow_gpu_sched.egg-info/ in the checkout, a second airflow-gpu-sched distribution on the child's
# PYTHONPATH; Airflow then loads our plugin twice and the Task SDK's plugins manager (1.3.2) returns
# at the duplicate instead of skipping it, so the OpenLineage plugin after it never registers in
# the task process (apache/airflow#72253; core's copy was fixed in #60498). test_wheel now builds
# from a copy, the child sees only the package and the tests, and the plugin warns (ui/plugin.py).
@pytest.mark.timeout(CHILD_TIMEOUT + 60)
def test_the_complete_event_has_the_inputs_outputs_and_run_facet(fast_emulator, tmp_path):
    events = tmp_path / "openlineage.jsonl"
    # the child's path: the package and the tests only, not whatever else lies in the checkout
    path = tmp_path / "path"
    path.mkdir()
    for name in ("airflow_gpu_sched", "tests"):
        (path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(path),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "gpu-sched-test",
           # The listener emits the task's events in a forked copy of the task process by default,
           # killed after execution_timeout (10 s default): under load the fork took 11 s and the
           # task's START/COMPLETE were lost while the DAG's COMPLETE (sent from a process pool,
           # never killed) arrived. dag.test() runs the task in a process with live threads (the
           # in-process Execution API loop, the supervisor comms), which a fork copies mid-flight;
           # the provider's thread mode (2.20+) avoids the fork. The timeout: a hang guard only.
           "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
           "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": str(CHILD_TIMEOUT)}
    for key in [k for k in env if k.startswith("AIRFLOW__DATABASE") or k in ("AIRFLOW_HOME", "AIRFLOW_HARNESS_HOME")]:
        del env[key]  # the child sets up its own home
    out = tmp_path / "result.json"
    child = subprocess.run([sys.executable, "-c", f"from tests.test_observe_lineage import _child; "
                                                  f"_child({str(tmp_path / 'home')!r}, {str(out)!r})"],
                           env=env, cwd=path, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert child.returncode == 0, child.stderr[-4000:]
    result = json.loads(out.read_text())
    # a second copy of the distribution drops the listener's task events (see above)
    assert len(result["distributions"]) == 1, result["distributions"]
    assert result["state"] == "success"
    training = result["training"]

    sent = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    complete = [e for e in sent if e.get("eventType") == "COMPLETE"
                and e["job"]["name"] == "lineage_nightly.train_and_register"]
    assert len(complete) == 1, ([(e.get("eventType"), e.get("job", {}).get("name")) for e in sent],
                                [line for line in child.stdout.splitlines() if "OpenLineage" in line][-20:])
    event = complete[0]
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("gs://bucket", "data/2026-01-01/train.jsonl"), ("gs://bucket", "vocab/words.txt")]
    outputs = {(d["namespace"], d["name"]): d for d in event["outputs"]}
    assert set(outputs) == {("gs://bucket", "nightly/20260101"),
                            (f"vertex-ai://{PROJECT}/{LOCATION}", "models/nightly-model")}
    model = outputs[(f"vertex-ai://{PROJECT}/{LOCATION}", "models/nightly-model")]
    assert model["facets"]["version"]["datasetVersion"] == f"{training['model_name']}@{training['model_version']}"
    facet = event["run"]["facets"]["gpuTraining"]
    assert facet["strategy"] == "FLEX_START" and facet["jobName"] == training["job_name"]
    assert facet["gpuHours"] == training["gpu_hours"] > 0 and facet["cost"] == training["cost"] > 0
    assert facet["currency"] == "USD" and facet["preemptions"] == 0
    assert facet["attempts"] == [{"strategy": "FLEX_START", "location": LOCATION, "state": a["state"],
                                  "gpu_hours": a["gpu_hours"], "cost": a["cost"]} for a in training["attempts"]]
    assert facet["_schemaURL"].startswith("https://openlineage.io/spec/")


def test_inputs_are_the_gs_uris_of_every_pools_args_but_the_output_dir():
    from airflow_gpu_sched.operators.lineage_facets import input_uris
    from airflow_gpu_sched.vertex.models import WorkerPoolSpec

    class Given:  # the operator's attributes input_uris reads, once rendered
        args = None
        base_output_dir = "gs://b/out/"
        worker_pool_specs = [
            {"containerSpec": {"imageUri": "x", "args": ["--data=gs://b/d/x.csv,gs://b/d/y.csv", "gs://b/out"]}},
            WorkerPoolSpec.model_validate({"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                           "containerSpec": {"imageUri": "x", "args": ["--eval=gs://c/e", "--lr=0.1"]}})]

    assert input_uris(Given) == ["gs://b/d/x.csv", "gs://b/d/y.csv", "gs://c/e"]
