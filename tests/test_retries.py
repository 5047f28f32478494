"""What an Airflow retry does after each way a training task can end (the retry table of
docs/operators.md): every row through ``dag.test()`` with ``retries=2, retry_delay=0``, against
the emulator, counting the jobs it created; and the no-retry errors agree with the engine's."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests

from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, with_a100_pool

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
PREEMPTIBLE_A100 = "custom_model_training_preemptible_nvidia_a100_gpus"
PIPELINE = dict(job_type="training_pipeline", model_display_name="m",
                model_serving_image_uri="us-docker.pkg.dev/vertex-ai/prediction/pytorch-gpu.2-4:latest")


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def _operator(strategy: str = "SPOT", **kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    step = {"strategy": strategy, **kw.pop("step", {})}
    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                               poll_interval=0.02, base_output_dir="gs://bucket/retries", retries=2,
                               retry_delay=timedelta(0), plan=kw.pop("plan", [step]), **{**A100, **kw})


def _created(emulator) -> int:
    """Jobs the service made: custom jobs (of any strategy) and training pipelines."""
    stats = emulator.stats()
    return sum(stats["jobsCreated"].values()) + stats.get("trainingPipelinesCreated", 0)


def _cancel_when_running(emulator):
    """Someone outside the task cancels its job once it runs (a user in the console)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                            timeout=5).json().get("customJobs", [])
        if jobs and jobs[0]["state"] == "JOB_STATE_RUNNING":
            requests.post(f"{emulator.url}/v1/{jobs[0]['name']}:cancel", json={}, timeout=5).raise_for_status()
            return
        time.sleep(0.02)


def _quota(emulator, metric: str, limit: int) -> None:
    emulator.set_quota_limit(metric, limit, region=LOCATION)


def _pool_in_error(emulator):
    emulator.reset(with_a100_pool("pool-a"))
    emulator.set_resource_state(f"projects/{PROJECT}/locations/{LOCATION}/persistentResources/pool-a", "ERROR",
                                "the pool's VMs could not be created")


# (row of the table, emulator set-up, operator arguments, something done while it runs,
#  jobs created in all, the task's final state, its last try, the error it failed with)
ROWS = [
    ("spec error", None, dict(labels={"team": "{{ 'ML Team' }}"}), None, 0, "failed", 1, None),
    ("user-code failure", None, dict(env={"EMULATOR_EXIT_CODE": "1"}), None, 1, "failed", 1,
     "TrainingJobFailedNoRetry"),
    ("user-code failure, retry_on_user_code_failure=True", None,
     dict(env={"EMULATOR_EXIT_CODE": "1"}, retry_on_user_code_failure=True), None, 3, "failed", 3, "TrainingJobFailed"),
    ("job timeout", None, dict(timeout="10s"), None, 1, "failed", 1, "TrainingJobTimedOut"),  # runs 30 s: a timeout
    ("job cancelled from outside the task", None, dict(env={"EMULATOR_RUN_SECONDS": "3000"}),
     _cancel_when_running, 1, "failed", 1, "TrainingJobCancelled"),
    ("deadline passed", None, dict(deadline=datetime(2020, 1, 1, tzinfo=timezone.utc)), None, 0, "failed", 1,
     "DeadlineExceeded"),
    ("capacity wait expired (FLEX_START)", lambda e: e.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0),
     dict(strategy="FLEX_START", step={"max_wait_duration": "60s"}), None, 3, "failed", 3, "CapacityWaitExpired"),
    ("the bound before RUNNING", lambda e: e.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0),
     dict(step={"capacity_wait_timeout": 0.5}), None, 3, "failed", 3, "CapacityWaitExpired"),
    ("preemption budget spent", lambda e: e.reset({**FAST, "spotPreemptionsPerHour": 360000, "maxServiceRestarts": 0}),
     dict(step={"max_preemption_retries": 0}, env={"EMULATOR_RUN_SECONDS": "3000"}), None, 3, "failed", 3,
     "PreemptionBudgetExhausted"),
    ("STANDARD stockout", lambda e: e.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0,
                                                   standard_stockout_seconds=60),
     dict(strategy="STANDARD"), None, 3, "failed", 3, "CapacityUnavailable"),
    # a retry runs the plan again from its first step: 2 jobs a try
    ("plan spent", lambda e: e.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0, spot=0),
     dict(plan=[{"strategy": "FLEX_START", "max_wait_duration": "60s"},
                {"strategy": "SPOT", "capacity_wait_timeout": 0.5}]), None, 6, "failed", 3, "CapacityWaitExpired"),
    ("quota too low (preflight)", lambda e: _quota(e, PREEMPTIBLE_A100, 0), {}, None, 0, "failed", 3, "QuotaTooLow"),
    ("quota exceeded at create (429)", lambda e: e.set_quota(LOCATION, "NVIDIA_TESLA_A100", standard=0),
     dict(strategy="STANDARD", quota_preflight=False), None, 0, "failed", 3, "QuotaTooLow"),
    ("persistent resource in ERROR", _pool_in_error, dict(strategy="PERSISTENT_RESOURCE",
                                                         step={"persistent_resource_id": "pool-a"}),
     None, 0, "failed", 3, "PersistentResourceUnavailable"),
    ("pipeline FAILED on quota", lambda e: _quota(e, PREEMPTIBLE_A100, 0),
     dict(quota_preflight=False, **PIPELINE), None, 3, "failed", 3, "QuotaTooLow"),
]


@pytest.mark.parametrize("row, setup, kwargs, during, jobs, state, tries, error", ROWS, ids=[r[0] for r in ROWS])
def test_what_a_retry_does_after_each_way_a_training_task_ends(airflow, row, setup, kwargs, during, jobs, state,
                                                               tries, error):
    from airflow.sdk import DAG

    if setup:
        setup(airflow)
    with DAG("retries", schedule=None, start_date=START) as dag:
        _operator(kwargs.pop("strategy", "SPOT"), **kwargs)
    helper = threading.Thread(target=during, args=(airflow,), daemon=True) if during else None
    if helper:
        helper.start()
    result = run_dag(dag, logical_date=START)
    if helper:
        helper.join()
    assert (result["train"].state, result["train"].try_number) == (state, tries)
    assert _created(airflow) == jobs
    ledger = result.task_state_store.get("train", {}).get("airflow_gpu_sched.ledger") or {}
    assert (ledger.get("failed") or {}).get("kind") == error  # what the last try raised
    # the UI plugin's record of the last try (orchestration/failure_record.py): the same error, every attempt
    record = result["train"].xcoms.get("training_failure")
    if error is None:  # bad input: refused before the plan's loop, no record
        assert record is None
    else:
        assert record["failure"]["kind"] == error and record["failure"]["try_number"] == tries
        assert len([a for a in record["attempts"] if a["job_name"]]) == jobs
    # every job is an attempt of one training run: no retry was taken for a clear (a new run)
    assert len([a for a in ledger.get("attempts", []) if a["job_name"]]) == jobs


def _clear_faults_once_the_first_try_failed(emulator):
    """Vertex AI comes back after the first try gave up on it (Airflow's metadata DB tells)."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with create_session() as session:
            ti = session.scalar(select(TaskInstance).where(TaskInstance.dag_id == "unreachable"))
            if ti is not None and (ti.try_number >= 2 or str(ti.state) == "up_for_retry"):
                emulator.clear_faults()
                return
        time.sleep(0.01)


def _fail_every_call_once_the_job_runs(emulator):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                            timeout=5).json().get("customJobs", [])
        if jobs and jobs[0]["state"] == "JOB_STATE_RUNNING":
            emulator.set_faults(error_rate=1.0, status_codes=[503])
            _clear_faults_once_the_first_try_failed(emulator)
            return
        time.sleep(0.02)


def test_vertex_unreachable_is_retried_and_the_retry_re_attaches_to_the_same_job(airflow):
    from airflow.sdk import DAG

    with DAG("unreachable", schedule=None, start_date=START) as dag:
        _operator(env={"EMULATOR_RUN_SECONDS": "300"}, transient_error_window=0.5)
    helper = threading.Thread(target=_fail_every_call_once_the_job_runs, args=(airflow,), daemon=True)
    helper.start()
    result = run_dag(dag, logical_date=START)
    helper.join()
    assert (result["train"].state, result["train"].try_number) == ("success", 2)
    assert _created(airflow) == 1
    ledger = result.task_state_store["train"]["airflow_gpu_sched.ledger"]
    assert [a["state"] for a in ledger["attempts"]] == ["JOB_STATE_SUCCEEDED"]
    assert airflow.stats()["faultsInjected"] > 0


def test_the_errors_a_retry_cannot_change_are_airflows_no_retry_exception():
    from airflow_gpu_sched import compat
    from airflow_gpu_sched.operators.base import ERRORS
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec, TrainingJobCancelled, TrainingJobFailed
    from airflow_gpu_sched.orchestration.plan_engine import NO_RETRY

    every = {**ERRORS, "InvalidTrainingSpec": InvalidTrainingSpec}
    assert {name for name, cls in every.items() if issubclass(cls, compat.AirflowFailException)} == NO_RETRY
    assert issubclass(ERRORS["TrainingJobFailedNoRetry"], TrainingJobFailed)  # `except TrainingJobFailed` holds
    assert issubclass(TrainingJobCancelled, compat.AirflowFailException)


class _Ti:
    """What the operator reads of Airflow's task instance: the try number and max_tries."""

    def __init__(self, try_number: int, max_tries: int):
        self.try_number, self.max_tries, self.map_index = try_number, max_tries, -1

    def xcom_push(self, key, value):
        pass


def test_after_a_user_code_failure_a_retry_fails_again_and_a_clear_trains_anew(fast_emulator):
    """Sync mode, one task state store across the tries: try 2 is a retry (its process died
    before Airflow saw try 1 fail), try 3 follows a clear (Airflow set max_tries = 2 + retries)."""
    from airflow_gpu_sched.orchestration.errors import TrainingJobFailedNoRetry
    from tests.test_operators import Store

    op = _operator(env={"EMULATOR_EXIT_CODE": "1"}, deferrable=False)  # retries=2
    store = Store()
    for ti in (_Ti(1, max_tries=2), _Ti(2, max_tries=2)):
        with pytest.raises(TrainingJobFailedNoRetry, match="retry_on_user_code_failure=False"):
            op.execute({"task_state_store": store, "ti": ti})
        assert _created(fast_emulator) == 1  # the retry made no job
    with pytest.raises(TrainingJobFailedNoRetry):
        op.execute({"task_state_store": store, "ti": _Ti(3, max_tries=4)})  # cleared: first try since is 3
    assert _created(fast_emulator) == 2
    ledger = store.data["airflow_gpu_sched.ledger"]
    assert ledger["failed"]["try"] == 3 and len(ledger["attempts"]) == 1  # a new training run


SEEN: list[tuple[int, int]] = []  # (try_number, max_tries) as Airflow handed each try and resume


def test_airflow_retries_read_as_tries_of_one_clear_cycle(airflow):
    """What TryStarted.first_try rests on: across Airflow's own retries ``max_tries`` stays put, so
    ``max_tries - retries + 1`` (the operator's first try since the last clear) is 1 in every try.
    Read from Airflow's own callback, not from the operator."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    SEEN.clear()
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    with DAG("cycle", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                            poll_interval=0.02, retries=2, retry_delay=timedelta(0),
                            on_execute_callback=lambda ctx: SEEN.append((ctx["ti"].try_number, ctx["ti"].max_tries)),
                            plan=[{"strategy": "SPOT", "capacity_wait_timeout": 0.5}], **A100)
    result = run_dag(dag, logical_date=START)
    assert result["train"].try_number == 3
    assert sorted({try_number for try_number, _ in SEEN}) == [1, 2, 3]  # also called on each resume
    assert {max_tries - 2 + 1 for _, max_tries in SEEN} == {1}  # one clear cycle: never read as a clear


def test_a_retry_of_the_try_that_saw_the_success_succeeds_from_it_and_trains_nothing(fast_emulator):
    """Try 1 saw its job succeed and died (or failed, e.g. in its summary) before Airflow recorded
    the success: the ledger says the run completed, by try 1. Try 2, an Airflow retry, succeeds
    from that run with the same result (the job's outputs read again) and no new job; a clear
    (Airflow set max_tries = 2 + retries) trains anew, as before."""
    from tests.test_operators import Store

    op = _operator(strategy="STANDARD", deferrable=False)  # retries=2
    store = Store()
    first = op.execute({"task_state_store": store, "ti": _Ti(1, max_tries=2)})
    assert _created(fast_emulator) == 1
    assert store.data["airflow_gpu_sched.ledger"]["completed_try"] == 1
    again = op.execute({"task_state_store": store, "ti": _Ti(2, max_tries=2)})  # the retry
    assert _created(fast_emulator) == 1  # trained nothing
    assert again == first
    cleared = op.execute({"task_state_store": store, "ti": _Ti(3, max_tries=4)})  # cleared: first try since is 3
    assert _created(fast_emulator) == 2
    assert cleared["job_name"] != first["job_name"] and len(cleared["attempts"]) == 1


def test_a_completed_run_without_the_try_that_saw_it_is_followed_by_a_new_run(fast_emulator):
    """A ledger written before completed_try existed (or a try with no task instance) keeps the
    old rule: a later try after a success starts a new training run."""
    from tests.test_operators import Store

    op = _operator(strategy="STANDARD", deferrable=False)
    store = Store()
    op.execute({"task_state_store": store, "ti": _Ti(1, max_tries=2)})
    store.data["airflow_gpu_sched.ledger"].pop("completed_try")
    op.execute({"task_state_store": store, "ti": _Ti(2, max_tries=2)})
    assert _created(fast_emulator) == 2
