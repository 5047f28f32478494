"""Capacity plans against the emulator: fallback across strategies and regions, the deadline,
cost and GPU-hours, callbacks; and plans rejected when the DAG is parsed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests

from airflow_gpu_sched.operators import GpuTrainingOperator, SpotTrainingOperator
from airflow_gpu_sched.orchestration.accounting import summary_table
from airflow_gpu_sched.orchestration.errors import (
    CapacityUnavailable,
    CapacityWaitExpired,
    DeadlineExceeded,
    InvalidTrainingSpec,
    QuotaTooLow,
    TrainingJobFailed,
)
from airflow_gpu_sched.orchestration.plans import (
    FlexStartStep,
    PersistentResourceStep,
    SpotStep,
    StandardStep,
    running_bound,
)
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT, with_a100_pool
from tests.test_operators import context

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
COMMON = dict(project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1", poll_interval=0.02,
              base_output_dir="gs://bucket/plan-run", **A100)
EVENTS: list[tuple[str, dict]] = []  # what the callbacks saw (module level: DAG tasks run in-process)


def _record(kind):
    return lambda record: EVENTS.append((kind, record))


def _jobs(emulator) -> list[dict]:
    body = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5).json()
    return list(reversed(body.get("customJobs", [])))  # oldest first


def test_a_plan_falls_back_through_every_strategy_and_succeeds_on_standard(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    fast_emulator.reset({**with_a100_pool(), "spotPreemptionsPerHour": 36000})
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with requests.Session() as http:  # a long job holds the pool's only replica
        blocker = GpuTrainingOperator(task_id="b", plan=[{"strategy": "STANDARD"}], **COMMON).build_job()
        blocker.job_spec.persistent_resource_id = "pool-a"
        blocker.job_spec.scheduling = None
        body = blocker.to_api()
        body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"] = [
            {"name": "EMULATOR_RUN_SECONDS", "value": "1000000"}]
        http.post(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", json=body,
                  timeout=5).raise_for_status()
    fast_emulator.advance(2)
    EVENTS.clear()
    with DAG("full_plan", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", plan=[
            {"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "pool-a", "capacity_wait_timeout": 0.5},
            {"strategy": "FLEX_START", "max_wait_duration": "60s"},
            {"strategy": "SPOT", "max_preemption_retries": 0},
            {"strategy": "STANDARD"},
        ], on_fallback=_record("fallback"), on_preempted=_record("preempted"),
            on_capacity_acquired=_record("acquired"), **COMMON)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    assert [a["strategy"] for a in training["attempts"]] == ["PERSISTENT_RESOURCE", "FLEX_START", "SPOT", "STANDARD"]
    assert [a["state"] for a in training["attempts"]] == ["CAPACITY_TIMEOUT", "JOB_STATE_FAILED", "JOB_STATE_FAILED",
                                                           "JOB_STATE_SUCCEEDED"]
    assert training["strategy"] == "STANDARD" and training["state"] == "JOB_STATE_SUCCEEDED"
    ours = [j for j in _jobs(fast_emulator) if j.get("labels", {}).get("airflow-task") == "train"]
    assert [j["jobSpec"].get("scheduling", {}).get("strategy") for j in ours] == ["FLEX_START", "SPOT", "STANDARD"]
    assert {j["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for j in ours} == {"gs://bucket/plan-run"}
    assert [e for e, _ in EVENTS].count("fallback") == 3
    assert [r["to"] for e, r in EVENTS if e == "fallback"] == ["FLEX_START", "SPOT", "STANDARD"]
    assert [e for e, _ in EVENTS].count("acquired") == 2  # the SPOT job and the STANDARD job got GPUs
    assert [r["strategy"] for e, r in EVENTS if e == "preempted"] == ["SPOT"]  # once, for the SPOT attempt


def test_the_next_region_is_tried_before_the_next_step(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG("regions", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", plan=[
            {"strategy": "FLEX_START", "max_wait_duration": "60s", "locations": [LOCATION, "us-east4"]},
            {"strategy": "STANDARD"}], **COMMON)

    training = run_dag(dag, logical_date=START)["train"].return_value
    assert [(a["strategy"], a["location"]) for a in training["attempts"]] == [
        ("FLEX_START", LOCATION), ("FLEX_START", "us-east4")]
    assert training["job_name"].startswith(f"projects/{PROJECT}/locations/us-east4/customJobs/")


def test_steps_first_order_tries_every_step_in_a_region_before_the_next(fast_emulator):
    op = GpuTrainingOperator(task_id="t", regions_first=False, plan=[
        {"strategy": "FLEX_START", "locations": ["us-central1", "us-east4"]},
        {"strategy": "SPOT", "locations": ["us-central1", "us-east4"]}], **COMMON)
    assert op.positions() == [(0, "us-central1"), (1, "us-central1"), (0, "us-east4"), (1, "us-east4")]


def test_a_deadline_too_close_for_flex_start_skips_it(fast_emulator):
    deadline = datetime.now(timezone.utc) + timedelta(minutes=2)
    op = GpuTrainingOperator(task_id="t", deferrable=False, deadline=deadline, expected_run_time="100s",
                             plan=[FlexStartStep(max_wait_duration=timedelta(hours=2)), StandardStep()], **COMMON)
    result = op.execute(context())
    assert [a["strategy"] for a in result["attempts"]] == ["STANDARD"]
    assert fast_emulator.stats()["jobsCreated"] == {"STANDARD": 1}


def test_a_flex_start_wait_is_clipped_to_the_deadline(fast_emulator):
    deadline = datetime.now(timezone.utc) + timedelta(hours=1)
    op = GpuTrainingOperator(task_id="t", deferrable=False, deadline=deadline, expected_run_time="30m",
                             plan=[FlexStartStep(max_wait_duration=timedelta(hours=2))], **COMMON)
    name = op.execute(context())["job_name"]
    job = op.client().get_custom_job(name)
    assert timedelta(minutes=29) < job.job_spec.scheduling.max_wait_duration <= timedelta(minutes=30)


def test_a_deadline_no_step_can_meet_fails_with_a_deadline_error(fast_emulator):
    op = GpuTrainingOperator(task_id="t", deferrable=False, deadline=datetime.now(timezone.utc) + timedelta(minutes=5),
                             expected_run_time="1h", plan=[{"strategy": "FLEX_START"}, {"strategy": "STANDARD"}],
                             **COMMON)
    with pytest.raises(DeadlineExceeded, match="deadline"):
        op.execute(context())
    assert fast_emulator.stats()["requests"].get("customJobs.create", 0) == 0


# The next two run under every variant of the emulator's assumed behaviours (conftest.VARIANTS).


def test_a_user_code_failure_on_spot_does_not_fall_back(variant_emulator):
    op = SpotTrainingOperator(task_id="t", deferrable=False, fallback=[{"strategy": "STANDARD"}],
                              env={"EMULATOR_EXIT_CODE": "1"}, **COMMON)
    with pytest.raises(TrainingJobFailed):
        op.execute(context())
    assert variant_emulator.stats()["jobsCreated"] == {"SPOT": 1}


def test_a_flex_start_wait_that_runs_out_falls_back_to_the_next_step(variant_emulator):
    variant_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[
        {"strategy": "FLEX_START", "max_wait_duration": "60s"}, {"strategy": "STANDARD"}], **COMMON)
    result = op.execute(context())
    first = result["attempts"][0]
    assert [a["strategy"] for a in result["attempts"]] == ["FLEX_START", "STANDARD"]
    # how the wait ends is a variant (flexStartExpiry): FAILED, EXPIRED or CANCELLED by the service
    assert first["state"] in ("JOB_STATE_FAILED", "JOB_STATE_EXPIRED", "JOB_STATE_CANCELLED")
    assert first["run_seconds"] == 0 and first["outcome"] == "capacity_timeout"
    assert first["queued_seconds"] >= 60  # the wait is counted even when EXPIRED has no endTime
    assert result["state"] == "JOB_STATE_SUCCEEDED"
    assert variant_emulator.stats()["jobsCreated"] == {"FLEX_START": 1, "STANDARD": 1}


def test_cost_and_gpu_hours_are_the_sums_of_the_emulators_timestamps(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    prices = {"currency": "EUR", "NVIDIA_TESLA_A100": {"FLEX_START": 2.0, "STANDARD": 3.0}}
    op = GpuTrainingOperator(task_id="t", deferrable=False, prices=prices, plan=[
        {"strategy": "FLEX_START", "max_wait_duration": "60s"}, {"strategy": "STANDARD"}],
        env={"EMULATOR_RUN_SECONDS": "720"}, **COMMON)
    result = op.execute(context())
    expected_hours = expected_cost = 0.0
    for job in _jobs(fast_emulator):
        if job["state"] == "JOB_STATE_SUCCEEDED":  # the one that ran (its run: EMULATOR_RUN_SECONDS);
            # every job has a startTime (at admission, as on real Vertex): it tells nothing here
            hours = 720 / 3600
            expected_hours += hours
            expected_cost += hours * prices["NVIDIA_TESLA_A100"][job["jobSpec"]["scheduling"]["strategy"]]
    assert result["gpu_hours"] == pytest.approx(expected_hours, abs=1e-3) and expected_hours == pytest.approx(0.2, abs=0.01)
    assert result["cost"] == pytest.approx(expected_cost, abs=1e-3) and result["currency"] == "EUR"
    assert [a["cost"] for a in result["attempts"]] == [0.0, pytest.approx(expected_cost, abs=1e-3)]
    table = summary_table(result)
    assert table.splitlines()[0].split() == ["#", "strategy", "region", "state", "queued", "s", "run", "s", "GPU-h",
                                             "cost"]
    assert "FLEX_START" in table and table.splitlines()[-1].split()[-1] == "EUR"


def test_prices_can_come_from_an_airflow_variable(fast_emulator, monkeypatch):
    import json

    monkeypatch.setenv("AIRFLOW_VAR_GPU_PRICES", json.dumps({"currency": "USD",
                                                             "NVIDIA_TESLA_A100": {"STANDARD": 1.0}}))
    op = GpuTrainingOperator(task_id="t", deferrable=False, prices="gpu_prices", plan=[{"strategy": "STANDARD"}],
                             env={"EMULATOR_RUN_SECONDS": "360"}, **COMMON)
    result = op.execute(context())
    assert result["currency"] == "USD" and result["cost"] == pytest.approx(0.1, abs=0.005)


@pytest.mark.parametrize("plan, field, words", [
    ([{"strategy": "SPOT"}], "machineType", "A2 and A3"),
    ([{"strategy": "CHEAPEST"}], "plan[0].strategy", "must be one of"),
    ([{"strategy": "FLEX_START", "max_wait": "2h"}], "plan[0].max_wait", "not an argument of a FLEX_START step"),
    ([{"strategy": "FLEX_START", "max_wait_duration": "-1h"}], "plan[0].max_wait_duration", "0 (wait forever)"),
    ([{"strategy": "SPOT", "max_preemption_retries": -2}], "plan[0].max_preemption_retries", ">= 0"),
    ([{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "Bad_Id"}], "plan[0].persistent_resource_id",
     "not a persistent resource id"),
    ([], "plan", "non-empty"),
], ids=["spot-on-g2", "unknown-strategy", "unknown-key", "negative-wait", "negative-budget", "bad-resource-id",
        "empty"])
def test_a_plan_a_step_cannot_take_is_an_error_when_the_dag_is_parsed(plan, field, words):
    with pytest.raises(InvalidTrainingSpec) as raised:
        GpuTrainingOperator(task_id="t", plan=plan, **{**COMMON, "machine_type": "g2-standard-8",
                                                       "accelerator_type": "NVIDIA_L4"})
    assert field in str(raised.value) and words in str(raised.value)


def test_a_create_refused_for_quota_moves_the_plan_on(fast_emulator):
    fast_emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", standard=0)  # no on-demand A100s in this region
    # without the preflight (which would skip the region first: test_operator_job_types), the create is refused
    op = GpuTrainingOperator(task_id="t", deferrable=False, quota_preflight=False, plan=[
        {"strategy": "STANDARD", "locations": [LOCATION, "us-east4"]}], **COMMON)
    result = op.execute(context())
    assert [(a["location"], a["state"]) for a in result["attempts"]] == [
        (LOCATION, "QUOTA_EXCEEDED"), ("us-east4", "JOB_STATE_SUCCEEDED")]
    assert "custom_model_training_nvidia_a100_gpus" in result["attempts"][0]["error"]
    assert fast_emulator.stats()["requests"]["customJobs.create"] == 2  # a resource quota is not retried


# ---------------------------------------------------------------------------- the bound on the time before RUNNING


T0 = datetime(2026, 1, 1, 22, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("step, deadline, expected, bound", [
    (SpotStep(), None, None, None),
    (SpotStep(capacity_wait_timeout=timedelta(minutes=30)), None, None, T0 + timedelta(minutes=30)),
    (SpotStep(capacity_wait_timeout=timedelta(hours=3)), T0 + timedelta(hours=4), timedelta(hours=2),
     T0 + timedelta(hours=2)),  # the deadline's is smaller
    (StandardStep(), T0 + timedelta(hours=4), None, T0 + timedelta(hours=4)),
    (StandardStep(capacity_wait_timeout=timedelta(minutes=10)), T0 + timedelta(hours=4), timedelta(hours=1),
     T0 + timedelta(minutes=10)),  # the step's own is smaller
    (FlexStartStep(), T0 + timedelta(hours=4), timedelta(hours=1), None),  # maxWaitDuration carries the deadline
    (FlexStartStep(capacity_wait_timeout=timedelta(minutes=5)), None, None, T0 + timedelta(minutes=5)),
    (PersistentResourceStep(persistent_resource_id="pool-a"), None, None, T0 + timedelta(hours=1)),
], ids=["none", "own", "deadline-smaller", "deadline-only", "own-smaller", "flex-deadline", "flex-own",
        "persistent-default"])
def test_running_bound_picks_the_smaller_of_the_steps_and_the_deadlines(step, deadline, expected, bound):
    found = running_bound(step, T0, deadline, expected)
    assert (found[0] if found else None) == bound


def test_a_negative_capacity_wait_timeout_is_an_error_when_the_dag_is_parsed():
    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\].capacity_wait_timeout.*0 or more"):
        GpuTrainingOperator(task_id="t", plan=[{"strategy": "SPOT", "capacity_wait_timeout": "-5m"}], **COMMON)


def test_a_spot_step_with_no_capacity_falls_back_past_its_bound_and_cancels_its_job(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    with DAG("spot_bound", schedule=None, start_date=START) as dag:  # deferrable: the triggerer's path
        GpuTrainingOperator(task_id="train", plan=[
            {"strategy": "SPOT", "capacity_wait_timeout": 0.5}, {"strategy": "STANDARD"}], **COMMON)

    result = run_dag(dag, logical_date=START)
    training = result["train"].return_value
    assert [(a["strategy"], a["state"]) for a in training["attempts"]] == [
        ("SPOT", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    assert "was not RUNNING by" in training["attempts"][0]["error"]
    spot_job = next(j for j in _jobs(fast_emulator) if j["jobSpec"]["scheduling"]["strategy"] == "SPOT")
    assert spot_job["name"] == training["attempts"][0]["job_name"]
    assert spot_job["state"] == "JOB_STATE_CANCELLED"  # no orphan left queuing


def test_a_job_queued_for_quota_moves_the_plan_on_past_its_bound(fast_emulator):
    fast_emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", preemptible=1)
    blocker = SpotTrainingOperator(task_id="b", **COMMON).build_job().to_api()
    blocker["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"] = [
        {"name": "EMULATOR_RUN_SECONDS", "value": "1000000"}]
    requests.post(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                  json=blocker, timeout=5).raise_for_status()  # holds the one preemptible A100
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[  # sync mode: the same trigger in the worker
        {"strategy": "SPOT", "capacity_wait_timeout": 0.5}, {"strategy": "STANDARD"}], **COMMON)
    result = op.execute(context())  # the preflight passes: the limit (1) covers the job (1)
    assert [(a["strategy"], a["state"]) for a in result["attempts"]] == [
        ("SPOT", "CAPACITY_TIMEOUT"), ("STANDARD", "JOB_STATE_SUCCEEDED")]
    queued = [j for j in _jobs(fast_emulator) if j["name"] == result["attempts"][0]["job_name"]]
    assert queued[0]["state"] == "JOB_STATE_CANCELLED" and "startTime" in queued[0]  # set at admission
    assert result["attempts"][0]["running_since"] is None and result["attempts"][0]["gpu_hours"] == 0


def test_a_bound_on_the_last_step_fails_typed(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    op = SpotTrainingOperator(task_id="t", deferrable=False, capacity_wait_timeout="0.5s", **COMMON)
    with pytest.raises(CapacityWaitExpired, match=r"not RUNNING within its bound \(capacity_wait_timeout=0.5s"):
        op.execute(context())
    assert fast_emulator.stats()["jobsByState"] == {"JOB_STATE_CANCELLED": 1}


# ---------------------------------------------------------------------------- STANDARD stockout, quota outcomes


def test_a_standard_stockout_falls_back_to_the_next_region(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0, standard_stockout_seconds=60)
    with DAG("stockout", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", plan=[
            {"strategy": "STANDARD", "locations": [LOCATION, "us-east4"]}, {"strategy": "SPOT"}], **COMMON)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    attempts = result["train"].return_value["attempts"]
    assert [(a["strategy"], a["location"], a["state"]) for a in attempts] == [
        ("STANDARD", LOCATION, "JOB_STATE_FAILED"), ("STANDARD", "us-east4", "JOB_STATE_SUCCEEDED")]
    assert attempts[0]["error"] == f"Resources are insufficient in region: {LOCATION}"


def test_a_standard_stockout_on_the_last_step_is_a_capacity_error_not_a_training_failure(fast_emulator):
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", standard=0, standard_stockout_seconds=60)
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[{"strategy": "STANDARD"}], **COMMON)
    with pytest.raises(CapacityUnavailable, match="stockout.*Resources are insufficient in region"):
        op.execute(context())


def test_a_create_refused_for_quota_on_the_last_step_fails_as_quota_too_low(fast_emulator):
    fast_emulator.set_quota(LOCATION, "NVIDIA_TESLA_A100", standard=0)
    op = GpuTrainingOperator(task_id="t", deferrable=False, quota_preflight=False, plan=[{"strategy": "STANDARD"}],
                             **COMMON)
    with pytest.raises(QuotaTooLow, match="refused at create.*custom_model_training_nvidia_a100_gpus.*increase"):
        op.execute(context())


def test_an_unlimited_quota_is_no_reason_to_skip_a_step(fast_emulator):
    metric = "custom_model_training_preemptible_nvidia_a100_gpus"
    fast_emulator.set_quota_limit(metric, 0)  # every region ...
    fast_emulator.set_quota_limit(metric, -1, region=LOCATION)  # ... but this one, where Cloud Quotas says unlimited
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[
        {"strategy": "SPOT", "locations": ["us-east4", LOCATION]}], **COMMON)
    result = op.execute(context())
    assert [(a["location"], a["state"]) for a in result["attempts"]] == [
        ("us-east4", "QUOTA_TOO_LOW"), (LOCATION, "JOB_STATE_SUCCEEDED")]


def test_a_retry_that_re_attaches_keeps_the_bound_of_the_try_that_submitted(fast_emulator):
    from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
    from tests.test_operators import Store

    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[
        {"strategy": "SPOT", "capacity_wait_timeout": "1h"}, {"strategy": "STANDARD"}], **COMMON)
    queued = op.client().create_custom_job(op.build_job(step=op.plan[0])).name
    store = Store()  # what the earlier try left: its job, and a bound that has passed since
    store.set(LEDGER_KEY, {"run": "r", "submission_key": None, "job_name": queued, "attempts": [], "preemptions": 0,
                           "completed": False, "position": 0,
                           "running_bound": {"by": datetime.now(timezone.utc).timestamp() - 1, "why": "1h of SPOT"}})
    result = op.execute(context(store))
    assert [(a["job_name"], a["state"]) for a in result["attempts"]] == [
        (queued, "CAPACITY_TIMEOUT"), (result["job_name"], "JOB_STATE_SUCCEEDED")]
    assert [j["state"] for j in _jobs(fast_emulator) if j["name"] == queued] == ["JOB_STATE_CANCELLED"]


@pytest.mark.parametrize("found", ["cancelled", "still-cancelling"])
def test_a_try_that_died_after_the_bound_cancel_moves_on_as_it_would_have(fast_emulator, found):
    """Issue 24: try 1's trigger cancelled its SPOT job at the bound, then try 1 died before acting
    on the event. The next try finds the job CANCELLED (or still CANCELLING) after the bound the
    ledger kept: that is the bound's capacity outcome, so it falls back to STANDARD instead of
    resubmitting SPOT."""
    from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
    from tests.conftest import FAST
    from tests.test_operators import Store

    fast_emulator.reset({**FAST, "cancelSeconds": 2 if found == "cancelled" else 3000})
    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    op = GpuTrainingOperator(task_id="t", deferrable=False, plan=[
        {"strategy": "SPOT", "capacity_wait_timeout": "2s"}, {"strategy": "STANDARD"}], **COMMON)
    queued = op.client().create_custom_job(op.build_job(step=op.plan[0])).name
    bound = datetime.now(timezone.utc).timestamp() - 1
    op.client().cancel_custom_job(queued)  # the trigger's cancel at the bound; its try died after it
    if found == "cancelled":
        fast_emulator.advance(60)  # past cancelSeconds: CANCELLED when the next try looks
    expected = "JOB_STATE_CANCELLED" if found == "cancelled" else "JOB_STATE_CANCELLING"
    assert [j["state"] for j in _jobs(fast_emulator) if j["name"] == queued] == [expected]
    store = Store()
    store.set(LEDGER_KEY, {"run": "r", "submission_key": None, "job_name": queued, "job_try": 1, "attempts": [],
                           "preemptions": 0, "completed": False, "position": 0,
                           "running_bound": {"by": bound, "why": "capacity_wait_timeout=2s"}})
    result = op.execute(context(store))
    assert [(a["strategy"], a["job_name"], a["state"]) for a in result["attempts"]] == [
        ("SPOT", queued, "CAPACITY_TIMEOUT"), ("STANDARD", result["job_name"], "JOB_STATE_SUCCEEDED")]
    assert "cancelled at its bound before RUNNING (capacity_wait_timeout=2s) by an earlier try" \
        in result["attempts"][0]["error"]
    spot_jobs = [j["name"] for j in _jobs(fast_emulator) if j["jobSpec"]["scheduling"]["strategy"] == "SPOT"]
    assert spot_jobs == [queued]  # the SPOT step was not submitted again
