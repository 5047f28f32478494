"""Issue 40: every waiting state is bounded, PAUSED is handled, and a job the service cancelled at
its ``scheduling.timeout`` fails as a timeout even when no poll saw it RUNNING. Through
``dag.test()`` against the emulator (its control API puts a job in PAUSED or in a state this code
does not know: ``POST /emulator/v1/{job}:setState``)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, every_custom_job

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)


@pytest.fixture
def airflow(airflow_db, vertex_conn):
    return vertex_conn


def _operator(**kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                               **{"poll_interval": 0.05, **A100, **kw})


def test_a_job_the_service_cancelled_at_its_timeout_unseen_running_fails_as_a_timeout(airflow):
    """timeoutOutcome cancelled, a poll interval longer than the whole run: no poll sees RUNNING,
    the service's startTime/endTime tell the timeout (was: "cancelled outside this task")."""
    from airflow.sdk import DAG

    airflow.reset({**FAST, "speed": 100000, "variants": {"timeoutOutcome": "cancelled"}})
    with DAG("timeout_unseen", schedule=None, start_date=START) as dag:
        _operator(plan=[{"strategy": "SPOT"}, {"strategy": "STANDARD"}], timeout="10m", poll_interval=1.0,
                  env={"EMULATOR_RUN_SECONDS": "1000000"})
    result = run_dag(dag, logical_date=START)
    assert result["train"].state == "failed"
    ledger = str(result.task_state_store["train"][LEDGER_KEY])
    assert "TrainingJobTimedOut" in ledger and "cancelled outside" not in ledger
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1}  # a timeout does not move the plan on
    assert airflow.stats()["cancels"] == 0  # the service's cancel, not ours


def _hold_the_first_job_in(emulator, state: str, stop: threading.Event) -> None:
    """Put the first custom job in ``state`` once it exists (the emulator's control API). (The code
    before issue 40 waited on it for ever: the suite's pytest timeout fails such a run.)"""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not stop.is_set():
        jobs = every_custom_job(emulator)
        if jobs:
            emulator.set_resource_state(jobs[0]["name"], state)
            return
        time.sleep(0.01)


def _run_with_job_held_in(airflow, state: str, dag_id: str, plan: list) -> object:
    from airflow.sdk import DAG

    stop = threading.Event()
    helper = threading.Thread(target=_hold_the_first_job_in, args=(airflow, state, stop), daemon=True)
    helper.start()
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        _operator(plan=plan)
    try:
        return run_dag(dag, logical_date=START)
    finally:
        stop.set()
        helper.join()


@pytest.mark.parametrize("state", ["JOB_STATE_HIBERNATING", "JOB_STATE_UPDATING"])
def test_a_job_waiting_in_a_state_this_code_does_not_know_is_cancelled_at_its_bound(airflow, state):
    """The bound applies to every state neither RUNNING nor ending: an unknown one (the JobState
    enum grows) and UPDATING alike; the plan moves on (was: waited unbounded)."""
    airflow.reset(FAST)
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)  # waits QUEUED, then held in `state`
    result = _run_with_job_held_in(airflow, state, f"unknown_{state.lower()}",
                                   [{"strategy": "SPOT", "capacity_wait_timeout": 2}, {"strategy": "STANDARD"}])
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["state"]) for a in attempts][0] == ("SPOT", "CAPACITY_TIMEOUT")
    assert attempts[1]["strategy"] == "STANDARD" and attempts[1]["outcome"] == "succeeded"
    assert state in str(attempts[0]["error"])  # the bound's note names the state it was in
    assert airflow.stats()["cancels"] == 1  # ours, at the bound


def test_a_paused_job_is_cancelled_and_the_try_fails_with_the_paused_message(airflow):
    """Google's SDKs take PAUSED as complete; this task cancels the job and fails, not retried,
    not moving the plan on (was: waited unbounded)."""
    airflow.reset(FAST)
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    result = _run_with_job_held_in(airflow, "JOB_STATE_PAUSED", "paused", [{"strategy": "SPOT"}, {"strategy": "STANDARD"}])
    assert result["train"].state == "failed"
    ledger = str(result.task_state_store["train"][LEDGER_KEY])
    assert "TrainingJobFailedNoRetry" in ledger and "JOB_STATE_PAUSED" in ledger
    assert airflow.stats()["jobsCreated"] == {"SPOT": 1} and airflow.stats()["cancels"] == 1
    assert [j["state"] for j in every_custom_job(airflow)] == ["JOB_STATE_CANCELLED"]
    from airflow_gpu_sched.orchestration.outcomes import PAUSED_MESSAGE

    assert PAUSED_MESSAGE in ledger


# ---------------------------------------------------------------------------- the pure rules

def _job(state: str, **times):
    from airflow_gpu_sched.vertex.models import CustomJob

    return CustomJob.model_validate({"name": "projects/p/locations/l/customJobs/1", "state": state, **times,
                                     "jobSpec": {"scheduling": {"timeout": "600s"}}})


@pytest.mark.parametrize("state, waiting", [
    ("JOB_STATE_QUEUED", True), ("JOB_STATE_PENDING", True), ("JOB_STATE_UNSPECIFIED", True),
    ("JOB_STATE_PAUSED", True), ("JOB_STATE_UPDATING", True), ("JOB_STATE_HIBERNATING", True),
    ("JOB_STATE_RUNNING", False), ("JOB_STATE_CANCELLING", False), ("JOB_STATE_SUCCEEDED", False),
    ("JOB_STATE_FAILED", False), ("JOB_STATE_CANCELLED", False), ("JOB_STATE_EXPIRED", False),
    ("JOB_STATE_PARTIALLY_SUCCEEDED", False), (None, True)])
def test_every_state_neither_running_ending_nor_ended_is_waiting(state, waiting):
    from airflow_gpu_sched.orchestration import state_times

    assert state_times.is_waiting(state) is waiting


@pytest.mark.parametrize("job, shown", [
    (None, "JOB_STATE_RUNNING"), ("JOB_STATE_QUEUED", "JOB_STATE_QUEUED"), ("JOB_STATE_PENDING", "JOB_STATE_PENDING"),
    ("JOB_STATE_RUNNING", "JOB_STATE_RUNNING"), ("JOB_STATE_SUCCEEDED", "JOB_STATE_RUNNING"),
    ("JOB_STATE_PAUSED", "JOB_STATE_PAUSED"), ("JOB_STATE_FAILED", "JOB_STATE_PENDING"),
    ("JOB_STATE_CANCELLED", "JOB_STATE_PENDING")])
def test_an_owner_that_says_running_is_shown_in_the_state_of_the_job_holding_its_gpus(job, shown):
    from airflow_gpu_sched.orchestration import state_times
    from airflow_gpu_sched.vertex.enums import JobState

    own = JobState.JOB_STATE_RUNNING
    assert state_times.capacity_state(own, JobState(job) if job else None).value == shown
    for other in (JobState.JOB_STATE_PENDING, JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_CANCELLING):
        assert state_times.capacity_state(other, JobState(job) if job else None) is other  # only RUNNING is read


def test_a_cancel_after_a_run_as_long_as_the_timeout_could_be_the_timeout_a_shorter_one_not():
    from airflow_gpu_sched.orchestration import outcomes, state_times

    start = "2026-01-01T00:00:00.140Z"
    ran_out = _job("JOB_STATE_CANCELLED", startTime=start, endTime="2026-01-01T00:10:11Z")
    early = _job("JOB_STATE_CANCELLED", startTime=start, endTime="2026-01-01T00:05:00Z")
    waited = state_times.new()  # a poll saw it QUEUED 8 minutes in: it cannot have run 10 minutes by 00:10:11
    waited["seen"]["JOB_STATE_QUEUED"] = {"at": "2026-01-01T00:08:00Z", "after": None}
    assert state_times.could_have_timed_out(ran_out, state_times.new())
    assert not state_times.could_have_timed_out(early, state_times.new())
    assert not state_times.could_have_timed_out(ran_out, waited)
    assert outcomes.cancel_cause(ran_out, state_times.new(), ours=False) is outcomes.CancelCause.TIMED_OUT
    assert outcomes.cancel_cause(early, state_times.new(), ours=False) is outcomes.CancelCause.UNKNOWN
    assert outcomes.cancel_cause(ran_out, state_times.new(), ours=True) is outcomes.CancelCause.OURS


def test_a_state_this_code_does_not_know_is_logged_as_such_once():
    from airflow_gpu_sched.orchestration.watch import JobWatch

    watch = JobWatch("projects/p/locations/l/customJobs/1")
    lines = [watch.observe(_job(state)) for state in
             ("JOB_STATE_QUEUED", "JOB_STATE_HIBERNATING", "JOB_STATE_HIBERNATING", "JOB_STATE_HIBERNATING")]
    assert lines[0] == "projects/p/locations/l/customJobs/1: JOB_STATE_QUEUED"
    assert "a state this version does not know" in lines[1] and "capacity_wait_timeout" in lines[1]
    assert lines[2:] == [None, None]


def test_a_paused_race_member_is_cancelled_at_once_and_cannot_win(airflow):
    """In a race, a member seen PAUSED is cancelled as one past its bound (was: left PAUSED until
    another member won); the member that gets GPUs later wins."""
    from airflow.sdk import DAG

    east = "us-east4"
    airflow.reset(FAST)
    for region in (LOCATION, east):
        airflow.set_capacity(region, "NVIDIA_TESLA_A100", spot=0)

    def pause_the_first_then_free_the_second():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not every_custom_job(airflow):
            time.sleep(0.01)
        name = every_custom_job(airflow)[0]["name"]
        airflow.set_resource_state(name, "JOB_STATE_PAUSED")
        while time.monotonic() < deadline and every_custom_job(airflow)[0]["state"] == "JOB_STATE_PAUSED":
            time.sleep(0.01)  # until this task cancelled it (the code before issue 40: never)
        airflow.set_capacity(east, "NVIDIA_TESLA_A100", spot=8)

    helper = threading.Thread(target=pause_the_first_then_free_the_second, daemon=True)
    helper.start()
    with DAG("paused_member", schedule=None, start_date=START) as dag:
        _operator(plan=[{"race": [{"strategy": "SPOT"}, {"strategy": "SPOT", "locations": [east]}]}])
    result = run_dag(dag, logical_date=START)
    helper.join()
    assert result.state == "success", result.tasks
    attempts = result["train"].return_value["attempts"]
    assert [(a["location"], a.get("race")) for a in attempts] == [(LOCATION, "lost"), (east, "won")]
    assert "JOB_STATE_PAUSED" in str(attempts[0]["error"])  # cancelled for its PAUSED, not as the race's loser
    assert [j["state"] for j in every_custom_job(airflow)] == ["JOB_STATE_CANCELLED"]
