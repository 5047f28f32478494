"""The operators inside Airflow: ``dag.test()`` on SQLite, deferrable triggers run inline,
retries, templates, the task state store; the example DAGs too. Against the emulator."""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from airflow_gpu_sched.orchestration.accounting import RESULT_KEYS
from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, with_a100_pool
from tests.google_types import format_violations, traffic_violations

EXAMPLES = Path(__file__).parent.parent / "dags_examples"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def _spot(**kw):
    from airflow_gpu_sched.operators import SpotTrainingOperator

    return SpotTrainingOperator(task_id=kw.pop("task_id", "train"), project_id=PROJECT, location=LOCATION,
                                image_uri="gcr.io/p/trainer:1", poll_interval=0.02,
                                base_output_dir="gs://bucket/spot", **{**A100, **kw})


def test_deferrable_training_between_data_prep_and_evaluation(airflow):
    from airflow.sdk import DAG, task

    from airflow_gpu_sched.operators import FlexStartTrainingOperator

    with DAG("flex_pipeline", schedule=None, start_date=START) as dag:
        @task
        def prepare() -> str:
            return "gs://bucket/data/2026-01-01/train.jsonl"

        train = FlexStartTrainingOperator(
            task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            args=["--data={{ ti.xcom_pull(task_ids='prepare') }}"], machine_type="a3-highgpu-8g",
            accelerator_type="NVIDIA_H100_80GB", accelerator_count=8, max_wait_duration="1h",
            poll_interval=0.02, labels={"run": "{{ ds_nodash }}"})

        @task
        def evaluate(result: dict) -> float:
            return result["gpu_hours"]

        prepare() >> train
        evaluate(train.output)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    assert tuple(training) == RESULT_KEYS and training["state"] == "JOB_STATE_SUCCEEDED"
    assert result["evaluate"].return_value == training["gpu_hours"] > 0
    assert result["train"].xcoms["job_name"] == training["job_name"]
    assert result["train"].xcoms["console_url"] == training["console_url"]
    assert result.task_state_store["train"][LEDGER_KEY]["completed"] is True
    job = requests.get(f"{airflow.url}/v1/{training['job_name']}", timeout=5).json()
    assert job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == [
        "--data=gs://bucket/data/2026-01-01/train.jsonl"]
    assert job["labels"]["run"] == "20260101" and job["labels"]["airflow-task"] == "train"


def test_a_retry_after_a_worker_crash_between_create_and_defer_makes_no_second_job(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator

    class DiesAfterCreate(SpotTrainingOperator):
        """Fault injection: the first try's worker dies right after the job was created."""

        def wait_for_job(self, context, job_name, *args, **kwargs):
            if context["ti"].try_number == 1:
                raise SystemExit("worker killed")
            return super().wait_for_job(context, job_name, *args, **kwargs)

    with DAG("crash_after_create", schedule=None, start_date=START) as dag:
        DiesAfterCreate(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                        poll_interval=0.02, retries=1, retry_delay=timedelta(0), **A100)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success" and result["train"].try_number == 2
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1}


def test_spot_preempted_past_the_service_restarts_is_resubmitted_and_counted(airflow):
    from airflow.sdk import DAG

    airflow.reset(FAST)

    with DAG("spot_recovery", schedule=None, start_date=START) as dag:
        _spot(env={"EMULATOR_RUN_SECONDS": "300"}, max_preemption_retries=2)

    def operator_polls() -> int:  # the operator's shared poller lists; this thread never does after the start
        return airflow.stats()["requests"].get("customJobs.list", 0)

    def until(condition, what: str, deadline: float) -> None:
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    def preempt_first_job_seven_times():
        # Each state is held until the operator has polled it: RUNNING until a list made after it
        # was seen, the restart QUEUED (no SPOT GPUs) until the next one. (Real-time windows of
        # 0.2 s RUNNING and 0.4 s PENDING instead were missed by the poll in a loaded run.)
        deadline = time.monotonic() + 120
        url = f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"
        jobs: list = []
        while not jobs:
            jobs = requests.get(url, timeout=5).json().get("customJobs", [])
            assert time.monotonic() < deadline, "no job"
        name = jobs[-1]["name"]
        state = lambda: airflow.history(name)["history"][-1]["state"]  # noqa: E731
        for _ in range(7):
            until(lambda: state() == "JOB_STATE_RUNNING", "the job never ran", deadline)
            seen = operator_polls()
            until(lambda: operator_polls() > seen + 1, "the operator stopped polling", deadline)
            airflow.set_capacity(LOCATION, A100["accelerator_type"], spot=0)
            airflow.preempt(name)
            seen = operator_polls()
            until(lambda: operator_polls() > seen + 1, "the operator stopped polling", deadline)
            airflow.set_capacity(LOCATION, A100["accelerator_type"], spot=8)

    errors: list = []
    preempter = threading.Thread(target=_recording, args=(preempt_first_job_seven_times, errors), daemon=True)
    preempter.start()
    result = run_dag(dag, logical_date=START)
    preempter.join()
    assert not errors, errors
    training = result["train"].return_value
    assert result.state == "success"
    assert [a["state"] for a in training["attempts"]] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]
    assert "STOCKOUT" in training["attempts"][0]["error"]
    assert training["preemptions"] == 7  # six service restarts seen while polling, and the stockout
    assert airflow.stats()["jobsCreated"] == {"SPOT": 2}


def _recording(function, errors: list) -> None:
    """Run ``function`` in a thread, keeping its assertion for the test's own thread."""
    try:
        function()
    except Exception as exc:  # noqa: BLE001 (reported by the test)
        errors.append(exc)


def test_a_template_that_renders_an_invalid_value_fails_before_any_create(airflow):
    from airflow.sdk import DAG

    with DAG("bad_template", schedule=None, start_date=START) as dag:
        _spot(labels={"team": "{{ 'ML Team' }}"})

    result = run_dag(dag, logical_date=START)
    assert result.state == "failed" and result["train"].try_number == 1  # no retry for bad input
    assert airflow.stats()["requests"].get("customJobs.create", 0) == 0


def test_user_code_failure_fails_the_task_without_resubmitting(airflow):
    from airflow.sdk import DAG

    with DAG("user_failure", schedule=None, start_date=START) as dag:
        _spot(env={"EMULATOR_EXIT_CODE": "1"})

    result = run_dag(dag, logical_date=START)
    assert result.state == "failed"
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1}


# ---------------------------------------------------------------------------- example DAGs


@pytest.fixture
def examples(airflow, monkeypatch, tmp_path):
    monkeypatch.setenv("GPU_SCHED_PROJECT", PROJECT)
    monkeypatch.setenv("GPU_SCHED_LOCATION", LOCATION)
    monkeypatch.setenv("GPU_SCHED_POLL_INTERVAL", "0.02")
    monkeypatch.setenv("GPU_SCHED_EMULATED_RUN_SECONDS", "60")
    monkeypatch.setenv("GPU_SCHED_DATA_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for name in [m for m in sys.modules if m == "_settings"]:
        monkeypatch.delitem(sys.modules, name)
    from airflow_gpu_sched import compat

    airflow.reset(with_a100_pool("a100-pool", replicas=2))
    airflow.start_traffic()  # every exchange of the run, checked against Google's types
    bag = compat.dag_bag(str(EXAMPLES))  # the DagBag of this Airflow (3.1/3.2: without its examples)
    bag.emulator_url, bag.emulator = airflow.url, airflow
    return bag


def test_example_dags_import_without_errors(examples):
    assert examples.import_errors == {}
    assert set(examples.dag_ids) == {"nightly_retraining", "nightly_retraining_tuned", "spot_training",
                                     "persistent_resource_training", "nightly_deploy", "race_training",
                                     "race_training_sequential"}


# rpcs each example DAG must have made (so that the type check below covers them)
EXAMPLE_RPCS = {
    "nightly_retraining": {"customJobs.create", "customJobs.list", "quotaInfos.list"},
    "nightly_retraining_tuned": {"hyperparameterTuningJobs.create", "trainingPipelines.create", "quotaInfos.list"},
    "spot_training": {"customJobs.create", "customJobs.list", "quotaInfos.list"},
    "persistent_resource_training": {"customJobs.create", "persistentResources.get"},
}


@pytest.mark.parametrize("dag_id, task_id, strategy", [
    ("nightly_retraining", "train", "FLEX_START"),
    ("nightly_retraining_tuned", "train_and_register", "FLEX_START"),
    ("spot_training", "train_on_spot", "SPOT"),
    ("persistent_resource_training", "train_on_pool", "PERSISTENT_RESOURCE"),
])
def test_example_dag_runs_green_against_the_emulator(examples, dag_id, task_id, strategy):
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    result = run_dag(examples.get_dag(dag_id), logical_date=today)  # tonight's run: its deadline is ahead
    assert result.state == "success", result.tasks
    assert result[task_id].return_value["strategy"] == strategy
    if dag_id == "nightly_retraining":
        assert result["evaluate"].return_value["model_dir"] == (
            f"gs://demo-training-bucket/nightly/{today:%Y%m%d}/model/")
    if dag_id == "nightly_retraining_tuned":
        report = result["report"].return_value
        best = result["tune"].return_value["best_trial"]
        assert report["best_parameters"] == best["parameters"] and report["model_version"] == "1"
        pipeline = requests.get(f"{examples.emulator_url}/v1/{result[task_id].return_value['job_name']}",
                                timeout=5).json()
        assert f"--learning_rate={best['parameters']['learning_rate']}" in \
            pipeline["trainingTaskInputs"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    traffic = examples.emulator.traffic()
    assert EXAMPLE_RPCS[dag_id] <= {e["rpc"] for e in traffic}
    violations = traffic_violations(traffic)
    assert violations == [], f"{len(violations)} exchanges differ from Google's types:\n" + \
        format_violations(violations)


def test_persistent_resource_busy_pool_defers_on_capacity_then_runs(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import PersistentResourceTrainingOperator
    from airflow_gpu_sched.vertex.client import VertexClient

    airflow.reset(with_a100_pool())
    with DAG("busy_pool", schedule=None, start_date=START) as dag:
        op = PersistentResourceTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION,
                                                persistent_resource_id="pool-a", image_uri="gcr.io/p/trainer:1",
                                                poll_interval=0.02, **A100)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=airflow.url) as client:
        blocker = client.create_custom_job(op.build_job().model_copy(update={"display_name": "blocker"}))
        airflow.advance(2)  # the blocker holds the only replica
        result = run_dag(dag, logical_date=START)
        assert result.state == "success"
        mine = client.get_custom_job(result["train"].return_value["job_name"])
        assert mine.create_time >= client.get_custom_job(blocker.name).end_time


@pytest.mark.parametrize("outcome", ["cancelled", "succeeded", "failed"])
def test_a_running_job_cancelled_outside_airflow_under_each_cancel_outcome(airflow, outcome):
    """Deferrable, through dag.test(): someone cancels the RUNNING job (job_state.proto: CANCELLING
    may end SUCCEEDED, FAILED or CANCELLED; the emulator's cancelOutcome). CANCELLED, or FAILED by
    the cancel's SIGTERM: the task fails as cancelled, not retried, never as its code's failure.
    SUCCEEDED: the job completed despite the cancel, the task succeeds with it."""
    from airflow.sdk import DAG

    from tests.conftest import FORCED_VARIANTS

    airflow.reset({**FAST, "variants": {"cancelOutcome": outcome}})
    outcome = FORCED_VARIANTS.get("cancelOutcome", outcome)
    base = f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"

    def cancel_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = requests.get(base, timeout=5).json().get("customJobs", [])
            if jobs and jobs[0]["state"] == "JOB_STATE_RUNNING":
                time.sleep(0.3)  # seen RUNNING by the trigger's polls first
                requests.post(f"{airflow.url}/v1/{jobs[0]['name']}:cancel", json={}, timeout=5)
                return
            time.sleep(0.02)

    with DAG(f"cancel_outside_{outcome}", schedule=None, start_date=START) as dag:
        _spot(env={"EMULATOR_RUN_SECONDS": "300"}, retries=2, retry_delay=timedelta(0))
    canceller = threading.Thread(target=cancel_once_running, daemon=True)
    canceller.start()
    result = run_dag(dag, logical_date=START)
    canceller.join()
    assert airflow.stats()["cancels"] == 1 and airflow.stats()["jobsCreated"] == {"SPOT": 1}
    if outcome == "succeeded":
        assert result.state == "success" and result["train"].return_value["state"] == "JOB_STATE_SUCCEEDED"
        return
    assert result.state == "failed" and result["train"].try_number == 1  # TrainingJobCancelled: no retry
    ledger = result.task_state_store["train"][LEDGER_KEY]
    assert ledger["failed"]["kind"] == "TrainingJobCancelled", ledger["failed"]
