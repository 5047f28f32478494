"""The operators at the wire: submit, wait, decide, against the emulator.

The first group calls ``execute`` the way a worker does, in sync mode (``deferrable=False``:
the trigger loop runs in the worker), with a real key-value store standing in for Airflow's
``task_state_store``: fast, exact tests of the idempotency rules. DAG-level runs (deferrable,
retries, templates) are in ``test_operator_dags.py``.
"""

from __future__ import annotations

import time

import pytest
import requests

from airflow_gpu_sched.operators import (
    FlexStartTrainingOperator,
    PersistentResourceTrainingOperator,
    SpotTrainingOperator,
)
from airflow_gpu_sched.orchestration.accounting import ATTEMPT_KEYS, RESULT_KEYS, summary_table
from airflow_gpu_sched.orchestration.errors import (
    CapacityWaitExpired,
    GpuTrainingError,
    InvalidTrainingSpec,
    PersistentCapacityTimeout,
    PersistentResourceUnavailable,
    PreemptionBudgetExhausted,
    TrainingJobCancelled,
    TrainingJobFailed,
    VertexUnreachable,
)
from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.conftest import FAST, FORCED_VARIANTS, LOCATION, PROJECT, with_a100_pool


class Store:
    """The task_state_store interface (get/set), kept in a dict: what survives between tries."""

    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value, **_):
        self.data[key] = value


def context(store=None) -> dict:
    return {"task_state_store": store if store is not None else Store()}


COMMON = dict(project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1", poll_interval=0.02,
              deferrable=False, base_output_dir="gs://bucket/run-1")
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
H100x8 = dict(machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_H100_80GB", accelerator_count=8)


def flex(**kw) -> FlexStartTrainingOperator:
    return FlexStartTrainingOperator(task_id=kw.pop("task_id", "train"), **{**COMMON, **H100x8, **kw})


def spot(**kw) -> SpotTrainingOperator:
    return SpotTrainingOperator(task_id=kw.pop("task_id", "train"), **{**COMMON, **A100, **kw})


# ---------------------------------------------------------------------------- results


def test_flex_start_result_has_exactly_the_documented_figures(fast_emulator):
    result = flex(env={"EMULATOR_RUN_SECONDS": "36"}).execute(context())
    assert tuple(result) == RESULT_KEYS
    assert result["state"] == "JOB_STATE_SUCCEEDED" and result["strategy"] == "FLEX_START"
    assert len(result["attempts"]) == 1 and tuple(result["attempts"][0]) == ATTEMPT_KEYS
    # Exact when a poll saw RUNNING; on a loaded machine the 0.36 s real run can fall between two
    # polls, and the figures are then off by at most the documented times.bound_seconds.
    bound = result["attempts"][0]["times"]["bound_seconds"] + 1
    assert abs(result["run_seconds"] - 36) <= bound
    assert abs(result["queued_seconds"] - (FAST["queueSeconds"] + FAST["provisioningSeconds"])) <= bound
    assert result["gpu_hours"] == pytest.approx(8 * result["run_seconds"] / 3600, rel=1e-3)
    assert result["console_url"].endswith(f"/training/{result['job_name'].rsplit('/', 1)[1]}/cpu?project={PROJECT}")
    assert result["base_output_dir"] == "gs://bucket/run-1"
    assert result["preemptions"] == 0 and result["preemptions_lower_bound"] is False  # no SPOT: exact
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_flex_start_waits_for_capacity_then_runs(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=0)
    fast_emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=8, at_seconds=300)
    result = flex(max_wait_duration="1h").execute(context())
    assert result["state"] == "JOB_STATE_SUCCEEDED"
    assert result["queued_seconds"] >= 290  # the emulated wait for the GPUs


# The next tests run under every variant of the emulator's assumed behaviours (conftest.VARIANTS).


def test_flex_start_wait_expiry_fails_typed(variant_emulator):
    variant_emulator.reset({**variant_emulator.scenario, "speed": 1000})  # the 600 s wait in 0.6 s
    variant_emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=0)
    with pytest.raises(CapacityWaitExpired, match=r"capacity never came.*maxWaitDuration \(600s\)"):
        flex(max_wait_duration="10m").execute(context())
    assert variant_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_a_job_ended_at_its_timeout_fails_as_a_timeout(variant_emulator):
    """FAILED (timeoutOutcome: failed) or CANCELLED by the service (cancelled) at scheduling.timeout,
    counted from the first RUNNING: a timeout, never "cancelled outside this task"."""
    from airflow_gpu_sched.orchestration.errors import TrainingJobTimedOut

    with pytest.raises(TrainingJobTimedOut, match="scheduling.timeout"):
        spot(timeout="300s", env={"EMULATOR_RUN_SECONDS": "100000"}).execute(context())
    assert variant_emulator.stats()["jobsCreated"] == {"SPOT": 1}


def test_a_flex_start_job_that_never_runs_is_cancelled_at_its_capacity_wait_timeout(variant_emulator):
    """Its startTime is set at admission (by default, as on real Vertex): the bound still cancels it."""
    variant_emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=0)
    with pytest.raises(CapacityWaitExpired, match="not RUNNING within its bound"):
        flex(max_wait_duration="2h", capacity_wait_timeout=0.5).execute(context())
    stats = variant_emulator.stats()
    assert stats["jobsCreated"] == {"FLEX_START": 1} and stats["cancels"] == 1


def test_user_code_failure_fails_at_once_without_resubmitting(variant_emulator):
    with pytest.raises(TrainingJobFailed, match="non-zero status of 3"):
        spot(env={"EMULATOR_EXIT_CODE": "3"}).execute(context())
    assert variant_emulator.stats()["jobsCreated"] == {"SPOT": 1}


def test_spot_stockout_past_the_budget_fails_typed(variant_emulator):
    # preempted about every emulated second
    variant_emulator.reset({**variant_emulator.scenario, "spotPreemptionsPerHour": 3600})
    with pytest.raises(PreemptionBudgetExhausted, match="max_preemption_retries=1"):
        spot(max_preemption_retries=1, env={"EMULATOR_RUN_SECONDS": "100000"}).execute(context())
    stats = variant_emulator.stats()
    assert stats["jobsCreated"] == {"SPOT": 2} and stats["preemptions"] == 14


def test_spot_preempted_past_the_restarts_is_resubmitted_and_succeeds(variant_emulator):
    # Seeded preemptions (seed 7, 20/hour, 120 s runs): the first job is preempted, restarted once
    # by the service, preempted again -> STOCKOUT; the resubmitted job runs through.
    variant_emulator.reset({**variant_emulator.scenario, "speed": 500, "maxServiceRestarts": 1,
                            "spotPreemptionsPerHour": 20})
    result = spot(max_preemption_retries=1, env={"EMULATOR_RUN_SECONDS": "120"}).execute(context())
    stats = variant_emulator.stats()
    assert [a["state"] for a in result["attempts"]] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]
    assert "STOCKOUT" in result["attempts"][0]["error"]
    assert stats["jobsCreated"] == {"SPOT": 2} and stats["preemptions"] == 2
    # what the poller saw: the final stockout always, the service's restart only if visible and polled
    assert 1 <= result["preemptions"] <= stats["preemptions"] and result["preemptions_lower_bound"] is True
    assert "preemptions observed" in summary_table(result) and "lower bound" in summary_table(result)


def _recorded(store: Store, job_name: str | None, key: str | None = None) -> Store:
    store.set(LEDGER_KEY, {"run": "r", "submission_key": key, "job_name": job_name, "attempts": [],
                           "preemptions": 0, "completed": False})
    return store


def test_vertex_unreachable_past_the_window_fails_typed_not_before(fast_emulator):
    op = flex(transient_error_window=1.0, env={"EMULATOR_RUN_SECONDS": "100000"})
    store = _recorded(Store(), op.client().create_custom_job(op.build_job()).name)
    fast_emulator.set_faults(error_rate=1.0, status_codes=[503])
    started = time.monotonic()
    with pytest.raises(VertexUnreachable, match="unreachable"):
        op.execute(context(store))
    assert time.monotonic() - started >= 1.0


# ---------------------------------------------------------------------------- idempotency


def test_a_later_try_reattaches_to_the_active_job(fast_emulator):
    store = Store()
    op = flex(env={"EMULATOR_RUN_SECONDS": "60"})
    job = op.client().create_custom_job(op.build_job())  # as if an earlier try created it, then died
    store.set(LEDGER_KEY, {"run": "r", "submission_key": "k", "job_name": job.name, "attempts": [],
                           "preemptions": 0, "completed": False})
    result = op.execute(context(store))
    assert result["job_name"] == job.name
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_a_try_that_died_between_create_and_saving_the_name_finds_the_job_by_label(variant_emulator):
    # under variants.listPages: short the list by label answers an empty first page with a token
    fast_emulator = variant_emulator
    store = Store()
    op = flex()
    key = "0123456789abcdef0123456789abcdef"
    job = op.client().create_custom_job(op.build_job({"gpu-sched-submission": key}))
    store.set(LEDGER_KEY, {"run": "r", "submission_key": key, "job_name": None, "attempts": [],
                           "preemptions": 0, "completed": False})
    assert op.execute(context(store))["job_name"] == job.name
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_a_job_that_succeeded_but_was_never_recorded_is_used_not_rerun(fast_emulator):
    store = Store()
    op = flex(env={"EMULATOR_RUN_SECONDS": "10"})
    job = op.client().create_custom_job(op.build_job())
    fast_emulator.advance(100)  # it finished while no worker watched
    store.set(LEDGER_KEY, {"run": "r", "submission_key": "k", "job_name": job.name, "attempts": [],
                           "preemptions": 0, "completed": False})
    result = op.execute(context(store))
    assert result["job_name"] == job.name and result["state"] == "JOB_STATE_SUCCEEDED"
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_a_try_after_its_job_was_cancelled_trains_anew(fast_emulator):
    store = Store()
    op = flex(env={"EMULATOR_RUN_SECONDS": "100000"})
    job = op.client().create_custom_job(op.build_job())
    op.client().cancel_custom_job(job.name)  # what on_kill did when a user cleared the deferred task
    fast_emulator.advance(10)
    _recorded(store, job.name)
    result = flex().execute(context(store))
    assert [a["state"] for a in result["attempts"]] == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"]
    assert result["job_name"] != job.name and fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 2}


class _Ti:
    """What the operator uses of Airflow's task instance: the try number, XCom pushes."""

    def __init__(self, try_number: int):
        self.try_number, self.map_index = try_number, -1

    def xcom_push(self, key, value):
        pass


def _cancel_first_job_soon(op, delay: float = 0.3, running_for: float | None = None):
    """What the earlier try's trigger (on_kill) does, from another thread, a moment later
    (``running_for``: that long after the job is RUNNING)."""
    import threading

    def cancel():
        time.sleep(delay)
        while running_for is not None:
            jobs = list(op.client().list_custom_jobs())
            if jobs and jobs[0].state.value == "JOB_STATE_RUNNING":
                time.sleep(running_for)
                break
            time.sleep(0.01)
        job = next(iter(op.client().list_custom_jobs()))
        op.client().cancel_custom_job(job.name)

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


# How a cancel of a RUNNING job ends (job_state.proto: CANCELLING "may only go to either
# JOB_STATE_SUCCEEDED, JOB_STATE_FAILED or JOB_STATE_CANCELLED"): the emulator's cancelOutcome.
CANCEL_OUTCOMES = ("cancelled", "succeeded", "failed")


def _with_cancel_outcome(emulator, outcome: str) -> str:
    """Reset the emulator with ``cancelOutcome``; the outcome in force (EMULATOR_VARIANTS wins)."""
    emulator.reset({**FAST, "variants": {"cancelOutcome": outcome}})
    return FORCED_VARIANTS.get("cancelOutcome", outcome)


@pytest.mark.parametrize("outcome", CANCEL_OUTCOMES)
def test_a_cancel_by_the_cleared_earlier_try_landing_after_this_try_re_attached_trains_anew(fast_emulator, outcome):
    """A cleared deferred task: the next try can re-attach before the earlier try's trigger
    (on_kill) cancels the job; that cancel must not fail the new try: it submits a new job. A job
    the cancel ended FAILED (its container killed by the cancel's SIGTERM, exit 143) is cancelled,
    not the user's code failing; one that completed despite the cancel is used (its output is there)."""
    outcome = _with_cancel_outcome(fast_emulator, outcome)
    op = flex(env={"EMULATOR_RUN_SECONDS": "300"})  # 3 s real: the cancel lands while it runs
    job = op.client().create_custom_job(op.build_job())
    store = _recorded(Store(), job.name)
    store.data[LEDGER_KEY]["job_try"] = 1  # try 1 submitted it, then was cleared while deferred
    canceller = _cancel_first_job_soon(op, running_for=0.3)  # RUNNING when cancelled: cancelOutcome applies
    result = op.execute({"task_state_store": store, "ti": _Ti(2)})
    canceller.join()
    if outcome == "succeeded":
        assert [a["state"] for a in result["attempts"]] == ["JOB_STATE_SUCCEEDED"]
        assert result["job_name"] == job.name and fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}
        return
    ended = {"cancelled": "JOB_STATE_CANCELLED", "failed": "JOB_STATE_FAILED"}[outcome]
    assert [a["state"] for a in result["attempts"]] == [ended, "JOB_STATE_SUCCEEDED"]
    assert result["attempts"][0]["run_seconds"] > 0  # it ran until the cancel: its GPU time counts
    assert result["job_name"] != job.name and fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 2}


@pytest.mark.parametrize("outcome", CANCEL_OUTCOMES)
def test_a_job_cancelled_outside_airflow_while_its_own_try_waits_fails_the_task(fast_emulator, outcome):
    """Cancelled by someone else while RUNNING: the task fails as cancelled, also when the cancel
    ended the job FAILED (exit 143 on the cancel's SIGTERM: not a failure of the user's code). A
    job that completed despite the cancel (SUCCEEDED) did train: the task succeeds with it."""
    outcome = _with_cancel_outcome(fast_emulator, outcome)
    op = flex(env={"EMULATOR_RUN_SECONDS": "300"})
    canceller = _cancel_first_job_soon(op, running_for=1.0)  # seen RUNNING first: a cancel while queued is capacity's
    if outcome == "succeeded":
        result = op.execute({"task_state_store": Store(), "ti": _Ti(1)})
        assert result["state"] == "JOB_STATE_SUCCEEDED" and len(result["attempts"]) == 1
    else:
        with pytest.raises(TrainingJobCancelled, match="cancelled outside this task") as raised:
            op.execute({"task_state_store": Store(), "ti": _Ti(1)})
        assert not isinstance(raised.value, TrainingJobFailed)
    canceller.join()
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}


def test_clearing_a_task_that_succeeded_starts_a_new_training_run(fast_emulator):
    store = Store()
    first = flex().execute(context(store))
    second = flex().execute(context(store))  # the same task instance, cleared by a user
    assert first["job_name"] != second["job_name"] and len(second["attempts"]) == 1
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 2}


def test_an_ambiguous_create_that_made_the_job_is_reconciled_by_label(fast_emulator):
    # Every request answers 503, creates after the job was made (a lost response).
    fast_emulator.set_faults(error_rate=1.0, status_codes=[503], after_handler_rate=1.0)
    store = Store()
    with pytest.raises(VertexUnreachable):
        flex(transient_error_window=0.5).execute(context(store))  # ambiguous create, lookup fails too
    fast_emulator.clear_faults()
    result = flex().execute(context(store))  # the next try finds the job by its submission key
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}
    assert result["state"] == "JOB_STATE_SUCCEEDED"


def test_the_job_carries_the_submission_key_and_task_labels(fast_emulator):
    store = Store()
    result = flex(labels={"team": "ml"}).execute(context(store))
    job = flex().client().get_custom_job(result["job_name"])
    assert job.labels["team"] == "ml" and job.labels["managed-by"] == "airflow-gpu-sched"
    assert len(job.labels["gpu-sched-submission"]) == 32
    assert job.job_spec.base_output_directory.output_uri_prefix == "gs://bucket/run-1"


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("factory, field", [
    (lambda: flex(**{**H100x8, "accelerator_type": "NVIDIA_TESLA_T4", "machine_type": "n1-standard-8",
                     "accelerator_count": 1}), "acceleratorType"),
    (lambda: flex(timeout="8d"), "jobSpec.scheduling.timeout"),
    (lambda: flex(max_wait_duration="-5m"), "maxWaitDuration"),
    (lambda: flex(max_wait_duration="soon"), "max_wait_duration"),
    (lambda: spot(machine_type="g2-standard-8", accelerator_type="NVIDIA_L4"), "machineType"),
    (lambda: spot(max_preemption_retries=-1), "max_preemption_retries"),
    (lambda: spot(labels={"Team": "ML"}), "labels.Team"),
    (lambda: spot(worker_pool_specs="[not json", image_uri=None, **dict.fromkeys(A100)), "worker_pool_specs"),
    (lambda: PersistentResourceTrainingOperator(task_id="t", persistent_resource_id="Pool_A", **{**COMMON, **A100}),
     "persistent_resource_id"),
], ids=["flex-t4", "flex-timeout-8d", "negative-wait", "bad-duration", "spot-g2", "negative-budget",
        "upper-case-label", "non-json-pools", "bad-resource-id"])
def test_bad_input_is_an_error_when_the_dag_is_parsed(factory, field):
    with pytest.raises(InvalidTrainingSpec) as raised:
        factory()
    assert field in str(raised.value)


# ---------------------------------------------------------------------------- persistent resources

@pytest.fixture
def pool(fast_emulator):
    fast_emulator.reset(with_a100_pool())
    return fast_emulator


def pool_op(**kw) -> PersistentResourceTrainingOperator:
    return PersistentResourceTrainingOperator(task_id="train", persistent_resource_id="pool-a",
                                              **{**COMMON, **A100, **kw})


def test_persistent_runs_on_a_free_pool(pool):
    result = pool_op().execute(context())
    assert result["state"] == "JOB_STATE_SUCCEEDED"
    assert pool.stats()["jobsCreated"] == {"PERSISTENT_RESOURCE": 1}


def test_persistent_mismatch_fails_before_any_create_listing_every_mismatch(pool):
    op = pool_op(worker_pool_specs=[
        {"machineSpec": {"machineType": "a2-highgpu-2g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 2},
         "replicaCount": 1, "containerSpec": {"imageUri": "x"}},
        {"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1},
         "replicaCount": 3, "containerSpec": {"imageUri": "x"}}], image_uri=None, **dict.fromkeys(A100))
    with pytest.raises(InvalidTrainingSpec) as raised:
        op.execute(context())
    assert [v.path for v in raised.value.violations] == ["jobSpec.workerPoolSpecs[0].machineSpec",
                                                         "jobSpec.workerPoolSpecs[1].replicaCount"]
    assert pool.stats()["requests"].get("customJobs.create", 0) == 0


def test_persistent_busy_pool_waits_then_runs(pool):
    blocker = pool_op().client().create_custom_job(pool_op(env={"EMULATOR_RUN_SECONDS": "60"}).build_job())
    pool.advance(2)  # the blocker is admitted and holds the only replica
    result = pool_op(capacity_wait_timeout="1h").execute(context())
    mine = pool_op().client().get_custom_job(result["job_name"])
    theirs = pool_op().client().get_custom_job(blocker.name)
    assert mine.create_time >= theirs.end_time  # submitted only once the replica was free


def test_persistent_busy_pool_past_the_timeout_fails_typed(pool):
    pool_op().client().create_custom_job(pool_op(env={"EMULATOR_RUN_SECONDS": "1000000"}).build_job())
    pool.advance(2)
    with pytest.raises(PersistentCapacityTimeout, match="stayed busy"):
        pool_op(capacity_wait_timeout=0.5).execute(context())
    assert pool.stats()["jobsCreated"] == {"PERSISTENT_RESOURCE": 1}  # only the blocker


def test_persistent_resource_in_error_fails_with_its_error(pool):
    pool.set_resource_state(f"projects/{PROJECT}/locations/{LOCATION}/persistentResources/pool-a", "ERROR",
                            "the reservation was released")
    with pytest.raises(PersistentResourceUnavailable, match="the reservation was released"):
        pool_op().execute(context())


def test_every_failure_the_plan_engine_names_is_raised_as_its_typed_error():
    from typing import get_args

    from airflow_gpu_sched.operators.base import ERRORS
    from airflow_gpu_sched.orchestration.plan_engine import FailureKind

    assert set(get_args(FailureKind)) == {*ERRORS, "InvalidTrainingSpec"}
    assert all(issubclass(cls, GpuTrainingError) for cls in ERRORS.values())


class FailingAfterCreate(Store):
    """A store whose write of a job name fails (the database went away right after the create)."""

    def set(self, key, value, **kw):
        if value.get("job_name"):
            raise OSError("task_state_store: connection reset")
        super().set(key, value, **kw)


def test_a_failed_ledger_write_after_the_create_cancels_the_job_it_cannot_record(fast_emulator):
    """retries=0: no later try would find the job; it must not hold GPUs unwatched."""
    from airflow_gpu_sched.operators.unrecorded import JobNotRecorded

    with pytest.raises(JobNotRecorded, match=r"could not be recorded in the task's ledger \(OSError: "
                                             r"task_state_store: connection reset\); it was cancelled") as raised:
        spot().execute(context(FailingAfterCreate()))
    jobs = requests.get(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                        timeout=5).json()["customJobs"]
    assert [j["name"] for j in jobs] == [raised.value.job_name]
    assert jobs[0]["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    assert fast_emulator.stats()["cancels"] == 1
