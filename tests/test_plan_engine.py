"""The plan's decisions, pure: no Airflow, no HTTP, a fake clock.

A table of every (step kind x outcome) pair and the action that follows, then a property test
over random plans and random event sequences for the invariants of a training task.
"""

from __future__ import annotations

import copy
from dataclasses import replace
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY, SubmissionLedger
from airflow_gpu_sched.orchestration.outcomes import Event
from airflow_gpu_sched.orchestration.plan_engine import (
    CapacityEnded,
    Close,
    Created,
    CreateRefused,
    Fail,
    Found,
    JobEnded,
    KeepBound,
    Move,
    NewRun,
    Note,
    Plan,
    Rewind,
    QuotaRead,
    ReadQuota,
    ReadReservation,
    ReadResource,
    ReservationRead,
    ReAttach,
    ResourceRead,
    State,
    Submit,
    Succeed,
    TryStarted,
    WaitForCapacity,
    WaitForJob,
    Failure,
    decide,
    failure_text,
)
from airflow_gpu_sched.orchestration.plans import (
    FlexStartStep,
    PersistentResourceStep,
    ReservationStep,
    SpotStep,
    StandardStep,
)
from airflow_gpu_sched.vertex.rules import Violation

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
HERE, THERE = "us-central1", "us-east4"
JOB = f"projects/p/locations/{HERE}/customJobs/1"
STEPS = {
    "PERSISTENT_RESOURCE": PersistentResourceStep(persistent_resource_id="pool-a"),
    "FLEX_START": FlexStartStep(max_wait_duration=timedelta(hours=2)),
    "SPOT": SpotStep(max_preemption_retries=1),
    "STANDARD": StandardStep(),
    "RESERVATION": ReservationStep(reservation="projects/p/zones/us-central1-a/reservations/r1"),
}
PREREAD = ("PERSISTENT_RESOURCE", "RESERVATION")  # steps that read something before the quota
KINDS = tuple(STEPS)


def plan_of(*steps, **knobs) -> Plan:
    return Plan.of(list(steps), HERE, project="p", checkpoints="gs://b/run", **knobs)


def then_standard_there(kind: str, **knobs) -> Plan:
    """The step under test, then STANDARD in another region: a move shows where the plan went."""
    return plan_of(STEPS[kind], StandardStep(locations=(THERE,)), **knobs)


def summary(action) -> str:
    """The action and its effects in a few words (notes left out)."""
    parts = []
    for effect in action.effects:
        if isinstance(effect, Close):
            parts.append(f"close {effect.state or effect.outcome}")
        elif isinstance(effect, Move):
            parts.append(f"move ({effect.failure.kind})")
    parts.append(_what(action))
    return "; ".join(parts)


def _what(action) -> str:
    if isinstance(action, (Submit, ReadQuota)):
        verb = "submit" if isinstance(action, Submit) else "read quota"
        return f"{verb} {action.step.strategy}@{action.location}"
    if isinstance(action, ReadResource):
        return f"read resource {action.name.rsplit('/', 1)[-1]}"
    if isinstance(action, ReadReservation):
        return f"read reservation {action.name.rsplit('/', 1)[-1]}"
    if isinstance(action, WaitForCapacity):
        return f"wait for capacity {action.wait}"
    if isinstance(action, (WaitForJob, ReAttach)):
        return f"{'wait for' if isinstance(action, WaitForJob) else 're-attach to'} {action.job_name}"
    if isinstance(action, Succeed):
        return "succeed"
    assert isinstance(action, Fail)
    return f"fail {action.failure.kind}"


# ---------------------------------------------------------------------------- the table

ACTIVE = State(job_name=JOB, job_try=1)  # the current job, submitted by this try (try 1)
SPENT = State(job_name=JOB, job_try=1, attempts=((0, "preempted"),))  # one preemption here already


def ended(kind: Event, **kw) -> JobEnded:
    return JobEnded(now=NOW, kind=kind, job_name=JOB, job_state=kw.pop("job_state", "JOB_STATE_FAILED"),
                    try_number=kw.pop("try_number", 1), **kw)


# outcome -> (the ledger's state, the event)
OUTCOMES = {
    "start": (State(), TryStarted(now=NOW, try_number=1)),
    "succeeded": (ACTIVE, ended(Event.SUCCEEDED, job_state="JOB_STATE_SUCCEEDED")),
    "failed-user-code": (ACTIVE, ended(Event.FAILED, job_error="The replica workerpool0-0 exited with a non-zero "
                                                               "status of 1.")),
    "cancelled-by-someone-else": (ACTIVE, ended(Event.CANCELLED, job_state="JOB_STATE_CANCELLED")),
    "cancelled-earlier-try": (ACTIVE, ended(Event.CANCELLED, job_state="JOB_STATE_CANCELLED", try_number=2)),
    "preempted-within-budget": (ACTIVE, ended(Event.PREEMPTED, job_error="STOCKOUT")),
    "preempted-budget-spent": (SPENT, ended(Event.PREEMPTED, job_error="STOCKOUT")),
    "capacity-timeout-flex-wait": (ACTIVE, ended(Event.CAPACITY_TIMEOUT, job_state="JOB_STATE_EXPIRED",
                                                 max_wait=timedelta(hours=2))),
    "capacity-timeout-bound": (ACTIVE, ended(Event.CAPACITY_TIMEOUT, job_state="JOB_STATE_CANCELLED",
                                             running_bound="capacity_wait_timeout=600s of SPOT",
                                             message=f"{JOB} was not RUNNING by ...: cancelled it")),
    "quota-exceeded-429-at-create": (State(), CreateRefused(now=NOW, text="429 ...", message=(
        "The following quota metrics exceed quota limits: aiplatform.googleapis.com/x"))),
    "quota-exceeded-pipeline-failed": (ACTIVE, ended(Event.QUOTA_EXCEEDED, job_error="quota metrics exceed")),
    "quota-fits": (State(), QuotaRead(now=NOW)),
    "quota-too-low": (State(), QuotaRead(now=NOW, too_low="quota ... is 0, the job needs 8 at once")),
    "quota-unreadable": (State(), QuotaRead(now=NOW, unreadable=True)),
    "resource-error": (State(), ResourceRead(now=NOW, name="r/pool-a", state="ERROR", error="released")),
    "resource-busy": (State(), ResourceRead(now=NOW, name="r/pool-a", state="RUNNING", shortages=(("a", 0, 1),))),
    "resource-provisioning": (State(), ResourceRead(now=NOW, name="r/pool-a", state="PROVISIONING")),
    "resource-free": (State(), ResourceRead(now=NOW, name="r/pool-a", state="RUNNING", runs_now=True)),
    "resource-mismatch": (State(), ResourceRead(now=NOW, name="r/pool-a", state="RUNNING",
                                                mismatches=(Violation("jobSpec.workerPoolSpecs[0]", "no pool"),))),
    "reservation-fits": (State(), ReservationRead(now=NOW, name="projects/p/zones/z/reservations/r1", free=2,
                                                  count=2, needed=1)),
    "reservation-full": (State(), ReservationRead(now=NOW, name="projects/p/zones/z/reservations/r1", problems=(
        "0 of 2 VMs free (2 in use), the job needs 1 (one per replica)",))),
    "reservation-mismatch": (State(), ReservationRead(now=NOW, name="projects/p/zones/z/reservations/r1", problems=(
        "workerPoolSpecs[0] is a2-highgpu-2g, the reservation holds a2-highgpu-1g",))),
    "reservation-missing": (State(), ReservationRead(now=NOW, name="projects/p/zones/z/reservations/r1",
                                                     missing=True)),
    "reservation-unreadable": (State(), ReservationRead(now=NOW, name="projects/p/zones/z/reservations/r1",
                                                        unreadable="403 PERMISSION_DENIED")),
    "capacity-available": (State(), CapacityEnded(now=NOW, kind=Event.CAPACITY_AVAILABLE, message="free")),
    "capacity-wait-timeout": (State(), CapacityEnded(now=NOW, kind=Event.CAPACITY_TIMEOUT, message="busy")),
    "capacity-resource-failed": (State(), CapacityEnded(now=NOW, kind=Event.FAILED, message="ERROR")),
    "error-unreachable": (ACTIVE, JobEnded(now=NOW, kind=Event.ERROR, job_name=JOB, message="unreachable")),
    "deadline-passed": (State(), TryStarted(now=NOW, try_number=1)),  # with a deadline an hour ago, below
}
NEXT = "read quota STANDARD@us-east4"  # the fallback step's first action
EXPECTED = {
    **{(k, "start"): "read quota {k}@us-central1".format(k=k) for k in KINDS if k not in PREREAD},
    ("PERSISTENT_RESOURCE", "start"): "read resource pool-a",
    ("RESERVATION", "start"): "read reservation r1",
    ("RESERVATION", "cancelled-earlier-try"): "close cancelled; read reservation r1",
    ("RESERVATION", "reservation-fits"): "read quota RESERVATION@us-central1",
    ("RESERVATION", "reservation-unreadable"): "read quota RESERVATION@us-central1",
    **{("RESERVATION", o): f"close RESERVATION_UNAVAILABLE; move (CapacityUnavailable); {NEXT}"
       for o in ("reservation-full", "reservation-mismatch", "reservation-missing")},
    **{(k, "succeeded"): "close succeeded; succeed" for k in KINDS},
    **{(k, "failed-user-code"): "close failed; fail TrainingJobFailedNoRetry" for k in KINDS},
    **{(k, "cancelled-by-someone-else"): "close cancelled; fail TrainingJobCancelled" for k in KINDS},
    ("PERSISTENT_RESOURCE", "cancelled-earlier-try"): "close cancelled; read resource pool-a",
    **{(k, "cancelled-earlier-try"): f"close cancelled; read quota {k}@us-central1" for k in KINDS
       if k not in PREREAD},
    ("SPOT", "preempted-within-budget"): "close preempted; submit SPOT@us-central1",
    ("SPOT", "preempted-budget-spent"): f"close preempted; move (PreemptionBudgetExhausted); {NEXT}",
    **{(k, p): f"close preempted; move (CapacityUnavailable); {NEXT}" for k in KINDS if k != "SPOT"
       for p in ("preempted-within-budget", "preempted-budget-spent")},  # a stockout off SPOT: no budget
    **{(k, "capacity-timeout-flex-wait"): f"close capacity_timeout; move (CapacityWaitExpired); {NEXT}"
       for k in KINDS},
    **{(k, "capacity-timeout-bound"): f"close CAPACITY_TIMEOUT; move (CapacityWaitExpired); {NEXT}" for k in KINDS},
    **{(k, "quota-exceeded-429-at-create"): f"close QUOTA_EXCEEDED; move (QuotaTooLow); {NEXT}" for k in KINDS},
    **{(k, "quota-exceeded-pipeline-failed"): f"close QUOTA_EXCEEDED; move (QuotaTooLow); {NEXT}" for k in KINDS},
    **{(k, "quota-fits"): f"submit {k}@us-central1" for k in KINDS if k != "PERSISTENT_RESOURCE"},
    **{(k, "quota-too-low"): f"close QUOTA_TOO_LOW; move (QuotaTooLow); {NEXT}" for k in KINDS
       if k != "PERSISTENT_RESOURCE"},
    **{(k, "quota-unreadable"): f"submit {k}@us-central1" for k in KINDS if k != "PERSISTENT_RESOURCE"},
    ("PERSISTENT_RESOURCE", "resource-error"): f"close RESOURCE_ERROR; move (PersistentResourceUnavailable); {NEXT}",
    ("PERSISTENT_RESOURCE", "resource-busy"): "wait for capacity 1:00:00",
    ("PERSISTENT_RESOURCE", "resource-provisioning"): "wait for capacity 1:00:00",
    ("PERSISTENT_RESOURCE", "resource-free"): "submit PERSISTENT_RESOURCE@us-central1",
    ("PERSISTENT_RESOURCE", "resource-mismatch"): "fail InvalidTrainingSpec",
    ("PERSISTENT_RESOURCE", "capacity-available"): "submit PERSISTENT_RESOURCE@us-central1",
    ("PERSISTENT_RESOURCE", "capacity-wait-timeout"):
        f"close CAPACITY_TIMEOUT; move (PersistentCapacityTimeout); {NEXT}",
    ("PERSISTENT_RESOURCE", "capacity-resource-failed"):
        f"close RESOURCE_UNAVAILABLE; move (PersistentResourceUnavailable); {NEXT}",
    **{(k, "error-unreachable"): "fail VertexUnreachable" for k in KINDS},
    **{(k, "deadline-passed"): "move (DeadlineExceeded); fail DeadlineExceeded" for k in KINDS},
}


@pytest.mark.parametrize("kind, outcome", list(EXPECTED), ids=[f"{k}-{o}" for k, o in EXPECTED])
def test_every_step_kind_and_outcome_leads_to_its_next_action(kind, outcome):
    state, event = OUTCOMES[outcome]
    knobs = {"deadline": NOW - timedelta(hours=1)} if outcome == "deadline-passed" else {}
    assert summary(decide(then_standard_there(kind, **knobs), state, event)) == EXPECTED[kind, outcome]


CAPACITY_OUTCOMES = [o for o in OUTCOMES if EXPECTED.get(("SPOT", o), "").startswith("close")
                     and "move" in EXPECTED["SPOT", o]]


@pytest.mark.parametrize("outcome", CAPACITY_OUTCOMES)
def test_a_capacity_outcome_on_the_last_position_fails_with_its_own_error(outcome):
    state, event = OUTCOMES[outcome]
    spot = decide(then_standard_there("SPOT"), state, event)
    last = decide(plan_of(STEPS["SPOT"]), state, event)
    assert isinstance(last, Fail) and last.failure == spot.moves[0].failure and not last.moves
    assert [type(e) for e in last.effects] == [Close]  # the attempt is recorded before the task fails


# ---------------------------------------------------------------------------- wording and numbers


def test_a_flex_start_wait_is_clipped_to_the_deadline_less_the_run_time():
    plan = plan_of(FlexStartStep(max_wait_duration=timedelta(hours=2)), deadline=NOW + timedelta(hours=1),
                   expected_run_time=timedelta(minutes=30), quota_preflight=False)
    action = decide(plan, State(), TryStarted(now=NOW))
    assert isinstance(action, Submit) and action.max_wait == timedelta(minutes=30)


def test_a_flex_start_wait_forever_is_clipped_too_and_a_short_one_is_kept():
    deadline = {"deadline": NOW + timedelta(hours=3), "quota_preflight": False}
    forever = decide(plan_of(FlexStartStep(max_wait_duration=timedelta(0)), **deadline), State(), TryStarted(now=NOW))
    short = decide(plan_of(FlexStartStep(max_wait_duration=timedelta(minutes=5)), **deadline), State(),
                   TryStarted(now=NOW))
    assert (forever.max_wait, short.max_wait) == (timedelta(hours=3), timedelta(minutes=5))


def test_a_flex_start_wait_under_a_minute_skips_the_step_with_the_reason():
    plan = plan_of(FlexStartStep(), StandardStep(), deadline=NOW + timedelta(minutes=10),
                   expected_run_time=timedelta(minutes=9, seconds=30), quota_preflight=False)
    action = decide(plan, State(), TryStarted(now=NOW))
    assert summary(action) == "move (DeadlineExceeded); submit STANDARD@us-central1"
    assert action.moves[0].failure.message == (
        "deadline 2026-01-01T12:10:00+00:00: only 0:00:30 would be left to wait for FLEX_START capacity (less than "
        "0:01:00): FLEX_START skipped")


def test_the_deadline_is_checked_again_when_the_quota_read_comes_back():
    plan = plan_of(FlexStartStep(), StandardStep(), deadline=NOW + timedelta(minutes=30),
                   expected_run_time=timedelta(minutes=28))
    assert isinstance(decide(plan, State(), TryStarted(now=NOW)), ReadQuota)  # 2 minutes to wait for FLEX_START
    late = decide(plan, State(), QuotaRead(now=NOW + timedelta(seconds=90)))  # the read took long: 30 s left
    assert summary(late) == "move (DeadlineExceeded); read quota STANDARD@us-central1"


def test_a_job_just_created_is_waited_for_under_the_smaller_bound_and_the_submission_is_logged():
    plan = plan_of(SpotStep(capacity_wait_timeout=timedelta(hours=3)), deadline=NOW + timedelta(hours=4),
                   expected_run_time=timedelta(hours=2))
    action = decide(plan, State(attempts=((0, "preempted"),)), Created(now=NOW, job_name=JOB))
    assert isinstance(action, WaitForJob) and action.job_name == JOB
    assert action.running_by == (NOW + timedelta(hours=2)).timestamp()
    assert action.why == "deadline 2026-01-01T16:00:00+00:00 - expected_run_time 7200s"
    assert action.effects == (Note("info", f"submitted {JOB} (SPOT(capacity_wait_timeout=3:00:00, "
                                           f"max_preemption_retries=3) in us-central1, attempt 2)"),
                              KeepBound(action.running_by, action.why))  # the ledger keeps the bound: an effect


def test_a_later_try_re_attaches_to_the_active_job_with_the_bound_its_try_kept():
    state = State(job_name=JOB, job_try=1, running_by=1.0e9, running_why="1h of SPOT")
    action = decide(plan_of(SpotStep()), state, TryStarted(now=NOW, try_number=2,
                                                           found=Found(job_name=JOB, state="JOB_STATE_QUEUED")))
    assert isinstance(action, ReAttach) and (action.job_name, action.running_by, action.why) == (JOB, 1.0e9,
                                                                                                 "1h of SPOT")
    assert action.effects[0].text == (f"re-attaching to {JOB} (JOB_STATE_QUEUED), submitted by an earlier try "
                                      "(with the same bound on its time before RUNNING)")


def test_a_job_that_succeeded_unwatched_is_the_result_not_a_rerun():
    found = Found(job_name=JOB, state="JOB_STATE_SUCCEEDED", by_key=True,
                  ended=ended(Event.SUCCEEDED, job_state="JOB_STATE_SUCCEEDED", try_number=2))
    action = decide(plan_of(StandardStep()), State(job_name=JOB), TryStarted(now=NOW, try_number=2, found=found))
    assert summary(action) == "close succeeded; succeed"
    assert action.effects[0] == Note("info", f"previous try's job {JOB} already ended JOB_STATE_SUCCEEDED")


def test_a_cancelled_job_found_at_the_start_of_a_try_means_the_task_was_cleared():
    found = Found(job_name=JOB, state="JOB_STATE_CANCELLED",
                  ended=ended(Event.CANCELLED, job_state="JOB_STATE_CANCELLED", try_number=1))  # even the same try
    action = decide(plan_of(StandardStep(), quota_preflight=False), ACTIVE, TryStarted(now=NOW, found=found))
    assert summary(action) == "close cancelled; submit STANDARD@us-central1"


BOUND = NOW - timedelta(minutes=5)  # the bound before RUNNING the first try kept in the ledger


@pytest.mark.parametrize("cleared", [False, True], ids=["retry", "cleared"])
def test_a_try_that_died_after_its_bound_cancel_is_followed_by_the_next_step_not_the_same(cleared):
    """Try 1's trigger cancelled the job at its bound, then try 1 died before acting: try 2 finds the
    job CANCELLED at or after the kept bound and moves on as try 1 would have (a clear since: anew)."""
    state = State(job_name=JOB, job_try=1, running_by=BOUND.timestamp(), running_why="1h of STANDARD")
    found = Found(job_name=JOB, state="JOB_STATE_CANCELLED", ended=ended(
        Event.CANCELLED, job_state="JOB_STATE_CANCELLED", try_number=2, ended_at=BOUND + timedelta(seconds=2)))
    action = decide(then_standard_there("STANDARD", quota_preflight=False), state,
                    TryStarted(now=NOW, try_number=2, found=found, first_try=2 if cleared else 1))
    if cleared:
        assert summary(action) == "close cancelled; submit STANDARD@us-central1"
        return
    assert summary(action) == "close CAPACITY_TIMEOUT; move (CapacityWaitExpired); submit STANDARD@us-east4"
    close = next(e for e in action.effects if isinstance(e, Close))
    assert "cancelled at its bound before RUNNING (1h of STANDARD) by an earlier try" in close.error


def test_a_job_cancelled_before_its_kept_bound_is_still_a_clear_or_a_user_cancel():
    state = State(job_name=JOB, job_try=1, running_by=BOUND.timestamp(), running_why="1h of STANDARD")
    found = Found(job_name=JOB, state="JOB_STATE_CANCELLED", ended=ended(
        Event.CANCELLED, job_state="JOB_STATE_CANCELLED", try_number=2, ended_at=BOUND - timedelta(seconds=2)))
    action = decide(then_standard_there("STANDARD", quota_preflight=False), state,
                    TryStarted(now=NOW, try_number=2, found=found, first_try=1))
    assert summary(action) == "close cancelled; submit STANDARD@us-central1"


def test_a_preemption_within_the_budget_resubmits_from_the_checkpoints_and_says_so():
    action = decide(plan_of(SpotStep(max_preemption_retries=2)), State(job_name=JOB, attempts=((0, "preempted"),)),
                    ended(Event.PREEMPTED, try_number=None, restarts=3))
    close = action.effects[0]
    assert isinstance(close, Close) and (close.preemptions, close.restarts) == (4, 3)
    assert action.effects[1] == Note("warning", f"{JOB} was preempted past the service's restarts: resubmitting (2 of "
                                                "2), resuming from the checkpoints in gs://b/run")
    assert isinstance(action, Submit) and action.max_wait is None


def test_the_errors_read_as_today():
    spent = decide(plan_of(SpotStep(max_preemption_retries=1)), SPENT, ended(Event.PREEMPTED, job_error="STOCKOUT"))
    assert str(spent.failure) == ("SPOT job preempted past the service's restarts 2 time(s); max_preemption_retries=1 "
                                  f"spent | job: {JOB} | Vertex AI says: STOCKOUT")
    flex = decide(plan_of(FlexStartStep()), ACTIVE, ended(Event.CAPACITY_TIMEOUT, job_state="JOB_STATE_EXPIRED",
                                                          max_wait=timedelta(minutes=10)))
    assert str(flex.failure) == ("FLEX_START capacity never came: the job waited its maxWaitDuration (600s) without "
                                 f"getting all its GPUs at once | job: {JOB} | Vertex AI says: the job ended "
                                 "JOB_STATE_EXPIRED")
    quota = decide(plan_of(StandardStep()), State(), CreateRefused(now=NOW, text="429", message=(
        "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_a100"
        "_gpus")))
    assert quota.failure.kind == "QuotaTooLow" and str(quota.failure).startswith(
        "the GPU quota is too low for this job in us-central1: refused at create by Vertex AI; raise "
        "custom_model_training_nvidia_a100_gpus in us-central1")
    assert failure_text("m", None, "said") == "m | Vertex AI says: said"


def test_a_fall_back_is_recorded_for_the_log_and_the_callback():
    action = decide(then_standard_there("SPOT"), SPENT, ended(Event.PREEMPTED, job_error="STOCKOUT"))
    (move,) = action.moves
    assert (move.src, move.dst) == (0, 1)
    assert move.text == (f"capacity outcome on SPOT(max_preemption_retries=1) in us-central1 ({move.failure}): "
                         "falling back to STANDARD in us-east4")
    assert move.record() == {"from": "SPOT", "from_location": HERE, "to": "STANDARD", "to_location": THERE,
                             "reason": str(move.failure)}


def test_a_busy_pool_waits_no_longer_than_the_deadline_allows_and_counts_the_wait_when_it_ends():
    plan = plan_of(PersistentResourceStep(persistent_resource_id="pool-a"), deadline=NOW + timedelta(minutes=40),
                   expected_run_time=timedelta(minutes=30))
    busy = ResourceRead(now=NOW, name="r/pool-a", state="RUNNING", shortages=(("a100s", 0, 1),))
    action = decide(plan, State(), busy)
    assert isinstance(action, WaitForCapacity) and action.wait == timedelta(minutes=10)
    assert action.effects[0].text == ("persistent resource r/pool-a is RUNNING; pool a100s has 0 of 1 replicas free: "
                                      "waiting up to 0:10:00 for capacity")
    timeout = decide(plan, State(waiting_since=NOW), CapacityEnded(now=NOW + timedelta(minutes=10),
                                                                    kind=Event.CAPACITY_TIMEOUT))
    assert timeout.effects[0].waited == 600.0 and timeout.effects[0].state == "CAPACITY_TIMEOUT"


# ---------------------------------------------------------------------------------------- retries and clears
# A try that starts after a failed one: a retry (first_try at or before the failed try) or a
# clear since (first_try after it). Plan of two steps, the earlier try stopped at the second.
TWO = plan_of(SpotStep(), StandardStep(locations=(THERE,)), quota_preflight=False)


@pytest.mark.parametrize("kind, first_try, expected", [
    ("TrainingJobFailedNoRetry", 1, "fail TrainingJobFailedNoRetry"),  # try 2 is a retry: no new job
    ("TrainingJobCancelled", 1, "fail TrainingJobCancelled"),
    ("DeadlineExceeded", 1, "fail DeadlineExceeded"),
    ("TrainingJobFailed", 1, "submit STANDARD@us-east4"),  # retry_on_user_code_failure: a new job, same step
    ("CapacityWaitExpired", 1, "rewind; submit SPOT@us-central1"),  # the plan was spent: again from its start
    ("QuotaTooLow", 1, "rewind; submit SPOT@us-central1"),
    ("PreemptionBudgetExhausted", 1, "rewind; submit SPOT@us-central1"),
    ("VertexUnreachable", 1, "submit STANDARD@us-east4"),
    ("InvalidTrainingSpec", 1, "submit STANDARD@us-east4"),  # its rules are checked again, before this
    ("TrainingJobFailedNoRetry", 2, "new run; submit SPOT@us-central1"),  # cleared after try 1: a rerun
    ("TrainingJobCancelled", 2, "new run; submit SPOT@us-central1"),
    ("CapacityWaitExpired", 2, "new run; submit SPOT@us-central1"),
    ("TrainingJobFailedNoRetry", None, "fail TrainingJobFailedNoRetry"),  # Airflow did not say: a retry
])
def test_a_try_after_a_failed_one_fails_again_goes_on_or_starts_anew(kind, first_try, expected):
    state = State(position=1, failure=Failure(kind, "why", JOB), failed_try=1)
    action = decide(TWO, state, TryStarted(now=NOW, try_number=2, first_try=first_try))
    words = [{NewRun: "new run", Rewind: "rewind"}[type(e)] for e in action.effects if isinstance(e, (NewRun, Rewind))]
    words.append(_what(action))
    assert "; ".join(words) == expected
    if isinstance(action, Fail):
        assert action.failure == state.failure  # the same error, word for word
        assert "clear the task to run it anew" in action.effects[0].text


@pytest.mark.parametrize("opted_in, first_try, expected", [
    (False, 1, "close failed; fail TrainingJobFailedNoRetry"),
    (True, 1, "close failed; submit STANDARD@us-east4"),
    (False, 2, "close failed; new run; submit SPOT@us-central1"),
])
def test_an_earlier_trys_job_found_failed_is_retried_only_when_told_or_after_a_clear(opted_in, first_try, expected):
    plan = plan_of(SpotStep(), StandardStep(locations=(THERE,)), quota_preflight=False,
                   retry_on_user_code_failure=opted_in)
    found = Found(job_name=JOB, state="JOB_STATE_FAILED", ended=ended(Event.FAILED, try_number=1))
    action = decide(plan, State(position=1, job_name=JOB, job_try=1),
                    TryStarted(now=NOW, try_number=2, found=found, first_try=first_try))
    words = []
    for effect in action.effects:
        if isinstance(effect, Close):
            words.append(f"close {effect.outcome}")
        elif isinstance(effect, NewRun):
            words.append("new run")
    assert "; ".join([*words, _what(action)]) == expected


def test_a_user_code_failure_raises_the_retryable_error_only_when_opted_in():
    failed = ended(Event.FAILED, job_error="exited with a non-zero status of 1")
    default = decide(plan_of(SpotStep()), ACTIVE, failed)
    opted = decide(plan_of(SpotStep(), retry_on_user_code_failure=True), ACTIVE, failed)
    assert (default.failure.kind, opted.failure.kind) == ("TrainingJobFailedNoRetry", "TrainingJobFailed")
    assert "retry_on_user_code_failure=False" in str(default.failure)


def test_the_state_reads_the_earlier_trys_failure():
    state = State.of({"failed": {"kind": "TrainingJobCancelled", "message": "m", "job_name": JOB, "detail": "d",
                                 "try": 3}})
    assert (state.failure, state.failed_try) == (Failure("TrainingJobCancelled", "m", JOB, "d"), 3)
    assert State.of({}).failure is None


def test_the_state_reads_the_ledgers_data():
    data = {"position": 2, "job_name": JOB, "job_try": 3, "waiting_since": NOW.isoformat(),
            "running_bound": {"by": 5.0, "why": "w"},
            "attempts": [{"position": 2, "outcome": "preempted"}, {"position": 1, "outcome": "preempted"}]}
    state = State.of(data)
    assert (state.position, state.job_name, state.job_try, state.running_by, state.running_why) == (2, JOB, 3, 5.0, "w")
    assert state.waiting_since == NOW and state.preempted_at(2) == 1 and len(state.attempts) == 2


def test_the_engine_imports_neither_airflow_nor_an_http_client():
    code = ("import sys, airflow_gpu_sched.orchestration.plan_engine; print(sorted({m for m in sys.modules if m.split('.')[0] in "
            "('airflow', 'requests', 'httpx')} | {m for m in sys.modules if m.startswith('google.auth')}))")
    root = Path(__file__).parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------- the property test


class _Store:
    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return copy.deepcopy(self.data.get(key, default))

    def set(self, key, value, **_):
        self.data[key] = copy.deepcopy(value)


class _Ledger(SubmissionLedger):
    """The real ledger over a dict store (its save() would import Airflow for the retention flag)."""

    def save(self) -> None:
        self._store.set(LEDGER_KEY, self.data)


LOCATIONS = st.lists(st.sampled_from([HERE, THERE]), min_size=1, max_size=2, unique=True).map(tuple)
WAITS = st.sampled_from([None, timedelta(0), timedelta(minutes=10), timedelta(hours=1)])
STEP = st.one_of(
    st.builds(PersistentResourceStep, persistent_resource_id=st.just("pool-a"), locations=LOCATIONS,
              capacity_wait_timeout=WAITS),
    st.builds(FlexStartStep, locations=LOCATIONS, capacity_wait_timeout=WAITS,
              max_wait_duration=st.sampled_from([timedelta(0), timedelta(minutes=10), timedelta(days=1)])),
    st.builds(SpotStep, locations=LOCATIONS, capacity_wait_timeout=WAITS, max_preemption_retries=st.integers(0, 2)),
    st.builds(StandardStep, locations=LOCATIONS, capacity_wait_timeout=WAITS),
    st.builds(ReservationStep, locations=st.just((HERE,)), capacity_wait_timeout=WAITS,
              reservation=st.sampled_from(["projects/p/zones/us-central1-a/reservations/r1", "ANY"])),
)
MINUTES = st.integers(0, 6 * 60).map(lambda m: timedelta(minutes=m))
PLANS = st.builds(
    lambda steps, regions_first, deadline, run_time, preflight: Plan.of(
        steps, HERE, regions_first, project="p", deadline=None if deadline is None else NOW + deadline,
        expected_run_time=run_time, quota_preflight=preflight),
    st.lists(STEP, min_size=1, max_size=4), st.booleans(), st.none() | MINUTES, st.none() | MINUTES, st.booleans())


class World:
    """Vertex AI and Airflow around the engine, drawn at random: carries each action out as the
    operator does (its ledger writes through the real ledger, reopened at every wait as after a
    deferral), answers with a random outcome, retries the task after VertexUnreachable (the job
    lives on) and sometimes clears a try (its trigger's on_kill cancels the job)."""

    def __init__(self, draw, plan: Plan):
        self.draw, self.plan, self.now = draw, plan, NOW
        self.store = _Store()
        self.ledger = _Ledger(self.store)
        self.try_number = 1
        self.jobs: dict[str, str] = {}  # every job created -> its state ("ACTIVE" until it ends)
        self.keys: dict[str, str] = {}  # submission key -> the job carrying it
        self.outages = self.clears = self.crashes = 0  # bounded, so that every run ends
        self.started_positions: set[int] = set()
        self.cancelling: set[str] = set()

    @property
    def active(self) -> list[str]:
        return [name for name, state in self.jobs.items() if state == "ACTIVE"]

    def tick(self) -> datetime:
        self.now += self.draw(st.sampled_from([timedelta(0), timedelta(minutes=1), timedelta(minutes=20),
                                               timedelta(hours=2)]))
        return self.now

    def end(self, name: str, kind: Event, state: str, **kw) -> JobEnded:
        self.jobs[name] = state
        return JobEnded(now=self.tick(), kind=kind, job_name=name, job_state=state, try_number=self.try_number, **kw)

    def new_try(self) -> TryStarted:
        """The next try of the task: what the operator finds of the earlier one's job."""
        self.try_number += 1
        self.ledger = _Ledger(self.store)
        name = self.ledger.job_name
        by_key = name is None and self.ledger.submission_key in self.keys
        if by_key:
            name = self.keys[self.ledger.submission_key]
            self.ledger.record_job(name)
        found = None
        if name is not None:
            if self.jobs[name] == "ACTIVE" and self.draw(st.booleans()):
                self.end(name, Event.SUCCEEDED, "JOB_STATE_SUCCEEDED")  # it ran to its end unwatched
            state = self.jobs[name]
            ended = None
            if state != "ACTIVE":
                kind = Event.SUCCEEDED if state == "JOB_STATE_SUCCEEDED" else Event.CANCELLED
                ended = JobEnded(now=self.now, kind=kind, job_name=name, job_state=state, try_number=self.try_number)
            found = Found(job_name=name, state="JOB_STATE_RUNNING" if state == "ACTIVE" else state, ended=ended,
                          by_key=by_key)
        return TryStarted(now=self.tick(), try_number=self.try_number, found=found)

    def answer(self, action):
        """Carry the action out; the next event."""
        draw = self.draw
        if isinstance(action, ReadQuota):
            return draw(st.sampled_from([QuotaRead(now=self.tick()), QuotaRead(now=self.now, unreadable=True),
                                         QuotaRead(now=self.now, too_low="quota is 0")]))
        if isinstance(action, ReadResource):
            state = draw(st.sampled_from(["RUNNING", "PROVISIONING", "ERROR", "STOPPING"]))
            return ResourceRead(now=self.tick(), name=action.name, state=state, runs_now=draw(st.booleans()),
                                mismatches=(Violation("p", "r"),) if draw(st.integers(0, 9)) == 0 else ())
        if isinstance(action, ReadReservation):
            assert isinstance(action.step, ReservationStep) and action.step.specific == action.name
            return draw(st.sampled_from([
                ReservationRead(now=self.tick(), name=action.name, free=2, count=2, needed=1),
                ReservationRead(now=self.now, name=action.name, problems=("0 of 2 VMs free",)),
                ReservationRead(now=self.now, name=action.name, missing=True),
                ReservationRead(now=self.now, name=action.name, unreadable="403")]))
        if isinstance(action, Submit):
            assert not self.active, f"a submission while {self.active} trains"
            assert self.ledger.job_name is None
            if draw(st.integers(0, 5)) == 0:
                return CreateRefused(now=self.tick(), message="quota metrics exceed", text="429")
            key = self.ledger.submission_key or self.ledger.new_submission()
            name = f"projects/p/locations/{action.location}/customJobs/{len(self.jobs) + 1}"
            self.jobs[name], self.keys[key] = "ACTIVE", name
            if self.crashes < 1 and draw(st.integers(0, 7)) == 0:  # the worker dies before it saves the name
                self.crashes += 1
                return self.new_try()
            self.ledger.record_job(name, self.try_number)
            return Created(now=self.tick(), job_name=name)
        if isinstance(action, (WaitForJob, ReAttach)):
            if isinstance(action, WaitForJob):
                self.ledger.set_running_bound(action.running_by, action.why)
            assert self.jobs[action.job_name] == "ACTIVE"
            self.ledger = _Ledger(self.store)  # deferred: execute_complete reopens the ledger
            return self.job_outcome(action.job_name)
        if isinstance(action, WaitForCapacity):
            self.ledger.note_waiting_since(self.now)
            self.ledger = _Ledger(self.store)
            kind = draw(st.sampled_from([Event.CAPACITY_AVAILABLE, Event.CAPACITY_TIMEOUT, Event.FAILED]
                                        + ([Event.ERROR] if self.outages < 2 else [])))
            self.outages += kind is Event.ERROR
            return CapacityEnded(now=self.tick(), kind=kind, message="m")
        raise AssertionError(f"unexpected action {action!r}")

    def job_outcome(self, name: str):
        draw = self.draw
        outcome = draw(st.sampled_from(["succeeded", "failed", "cancelled", "preempted", "flex-expired", "bound",
                                        "quota", "unreachable", "cleared"]))
        if outcome == "unreachable" and self.outages < 2:
            self.outages += 1
            return JobEnded(now=self.tick(), kind=Event.ERROR, job_name=name, message="unreachable",
                            try_number=self.try_number)
        if name in self.cancelling:  # the cleared try's cancel lands while this try waits
            self.cancelling.discard(name)
            return self.end(name, Event.CANCELLED, "JOB_STATE_CANCELLED")
        if outcome == "cleared" and self.clears < 2:  # a user clears the deferred try: on_kill cancels the job
            self.clears += 1
            if draw(st.booleans()):
                self.jobs[name] = "JOB_STATE_CANCELLED"  # before the next try looks
            else:
                self.cancelling.add(name)  # after the next try re-attached to it
            return self.new_try()
        if outcome == "bound" and self.ledger.running_bound[0] is not None:
            return self.end(name, Event.CAPACITY_TIMEOUT, "JOB_STATE_CANCELLED", running_bound="why")
        kind, state = {
            "succeeded": (Event.SUCCEEDED, "JOB_STATE_SUCCEEDED"), "failed": (Event.FAILED, "JOB_STATE_FAILED"),
            "cancelled": (Event.CANCELLED, "JOB_STATE_CANCELLED"), "preempted": (Event.PREEMPTED, "JOB_STATE_FAILED"),
            "flex-expired": (Event.CAPACITY_TIMEOUT, "JOB_STATE_EXPIRED"),
            "quota": (Event.QUOTA_EXCEEDED, "JOB_STATE_FAILED"),
        }.get(outcome, (Event.SUCCEEDED, "JOB_STATE_SUCCEEDED"))
        return self.end(name, kind, state, restarts=draw(st.integers(0, 2)))

    def carry_out(self, effect) -> None:
        if isinstance(effect, Close):
            if effect.job_name is not None:
                assert effect.job_name == self.ledger.job_name, "the engine closes the ledger's own job"
                assert self.jobs[effect.job_name] != "ACTIVE", "an attempt is closed only once its job ended"
            else:
                assert self.ledger.job_name is None
            record = {"job_name": effect.job_name, "position": effect.position, "outcome": effect.outcome,
                      "state": effect.state}
            self.ledger.finish_attempt(record, effect.preemptions, effect.completed)
        elif isinstance(effect, Move):
            assert (effect.src, effect.dst) == (self.ledger.data["position"], self.ledger.data["position"] + 1)
            self.ledger.move_to(effect.dst)

    def check_deadline(self, event, action) -> None:
        """A step is begun only while the deadline can still be met; waits never outlast it."""
        plan = self.plan
        if plan.deadline is None:
            return
        needed = plan.expected_run_time or timedelta(0)
        position = getattr(action, "position", None)
        if position is not None and position not in self.started_positions:
            self.started_positions.add(position)
            assert plan.deadline - event.now > needed, "a step began after the deadline was out of reach"
        if isinstance(action, Submit) and isinstance(action.step, FlexStartStep) and action.max_wait is not None:
            assert event.now + action.max_wait + needed <= plan.deadline
        if isinstance(action, WaitForJob) and not isinstance(plan.at(self.ledger.data["position"])[0], FlexStartStep):
            assert action.running_by <= (plan.deadline - needed).timestamp()
        if isinstance(action, WaitForCapacity):
            assert action.wait is not None and action.wait <= max(plan.deadline - event.now - needed, timedelta(0))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_runs_keep_the_invariants_of_a_training_task(data):
    plan = data.draw(PLANS, label="plan")
    world = World(data.draw, plan)
    event = TryStarted(now=NOW, try_number=1)
    furthest = 0
    for _ in range(300):
        action = decide(plan, State.of(world.ledger.data), event)
        position_before = world.ledger.data.get("position", 0)
        for effect in action.effects:
            world.carry_out(effect)
        position = world.ledger.data.get("position", 0)
        assert position >= furthest, "the plan moved backward"
        furthest = position
        world.check_deadline(event, action)
        if isinstance(event, JobEnded) and event.kind is Event.FAILED:  # the user's code
            assert isinstance(action, Fail) and action.failure.kind == "TrainingJobFailedNoRetry"
            assert not action.moves and position == position_before
        if isinstance(action, Fail) and action.failure.kind == "VertexUnreachable":
            event = world.new_try()  # Airflow retries; the job (if any) lives on and is re-attached to
            continue
        if isinstance(action, (Succeed, Fail)):
            break
        event = world.answer(action)
    else:
        raise AssertionError("the task never ended")
    assert not world.active, f"the task ended with {world.active} still training"
    closed = [a["job_name"] for a in world.ledger.attempts if a["job_name"]]
    assert sorted(closed) == sorted(world.jobs), "every job submitted is recorded once, as it ended"
    if isinstance(action, Succeed):
        assert world.ledger.data["completed"] and closed[-1] == action.job_name


def test_a_reservation_that_cannot_take_the_job_moves_on_naming_why():
    plan = then_standard_there("RESERVATION")
    full = decide(plan, *OUTCOMES["reservation-full"])
    assert "0 of 2 VMs free (2 in use), the job needs 1" in full.moves[0].text
    assert "projects/p/zones/z/reservations/r1" in full.moves[0].text
    closed = [e for e in full.effects if isinstance(e, Close)][0]
    assert closed.state == "RESERVATION_UNAVAILABLE" and "0 of 2 VMs free" in closed.error
    missing = decide(plan, *OUTCOMES["reservation-missing"])
    assert "does not exist" in missing.moves[0].text
    unreadable = decide(plan, *OUTCOMES["reservation-unreadable"])
    assert any(isinstance(e, Note) and e.level == "warning" and "compute.reservations.get" in e.text
               for e in unreadable.effects)


def test_an_any_reservation_step_reads_nothing_before_the_quota():
    plan = plan_of(ReservationStep(reservation="ANY"))
    action = decide(plan, State(), TryStarted(now=NOW, try_number=1))
    assert isinstance(action, ReadQuota) and any("RESERVATION(ANY)" in e.text for e in action.effects
                                                 if isinstance(e, Note))
    assert isinstance(decide(plan_of(ReservationStep(reservation="ANY"), quota_preflight=False), State(),
                             TryStarted(now=NOW, try_number=1)), Submit)


# ---------------------------------------------------------------------------- races, property-tested

from airflow_gpu_sched.orchestration.plan_engine import (  # noqa: E402
    CloseMember,
    MemberEnded,
    RaceCreated,
    RaceEnded,
    RaceQuotasRead,
    ReadRaceQuotas,
    SubmitRace,
    WaitForRace,
    Won,
)
from airflow_gpu_sched.orchestration.plans import RaceStep  # noqa: E402
from airflow_gpu_sched.orchestration.race_engine import MemberSeen, race_verdict  # noqa: E402

MEMBER = st.one_of(
    st.builds(FlexStartStep, locations=st.sampled_from([(), (THERE,)]), capacity_wait_timeout=WAITS,
              max_wait_duration=st.sampled_from([timedelta(minutes=10), timedelta(days=1)])),
    st.builds(SpotStep, locations=st.sampled_from([(), (THERE,)]), capacity_wait_timeout=WAITS,
              max_preemption_retries=st.integers(0, 1)),
    st.builds(StandardStep, locations=st.sampled_from([(), (THERE,)]), capacity_wait_timeout=WAITS),
)
RACE_STEP = st.lists(MEMBER, min_size=2, max_size=3).map(lambda ms: RaceStep(members=tuple(ms)))
RACE_PLANS = st.builds(
    lambda before, race, after, deadline, run_time, preflight: Plan.of(
        [*before, race, *after], HERE, True, project="p", deadline=None if deadline is None else NOW + deadline,
        expected_run_time=run_time, quota_preflight=preflight),
    st.lists(STEP, max_size=1), RACE_STEP, st.lists(STEP, max_size=1), st.none() | MINUTES, st.none() | MINUTES,
    st.booleans())
CAPACITY_KINDS = [Event.CAPACITY_TIMEOUT, Event.PREEMPTED, Event.QUOTA_EXCEEDED]


class RaceWorld(World):
    """:class:`World` with races: carries the race actions out as operators/race.py does (the
    ledger's race block, a key saved before each create, the name after it), and answers for the
    race trigger (first to RUNNING wins, the others cancelled at once; or every member ends)."""

    def __init__(self, draw, plan: Plan):
        super().__init__(draw, plan)
        self.winners: list[str] = []  # one per race that had one
        self.closed_members: set[str] = set()
        self.member_key: dict[str, str] = {}  # job -> the key it was created under

    def race(self) -> dict:
        return self.ledger.data.get("race") or {}

    def new_try(self) -> TryStarted:
        started = super().new_try()
        race = self.race()
        if not race or race.get("winner") is not None or all(m.get("closed") for m in race.get("members", [])) \
                or not race.get("members"):
            return started
        found = []
        for member in race["members"]:
            if member.get("closed"):
                continue
            name = member.get("job_name") or self.keys.get(member.get("key") or "")
            if name is not None and not member.get("job_name"):  # found by its key's label
                member["job_name"] = name
                self.ledger.save()
            found.append((member["index"], None if name is None else Found(job_name=name, state="JOB_STATE_QUEUED")))
        return replace(started, race_found=tuple(found))

    def answer(self, action):
        draw = self.draw
        if isinstance(action, ReadRaceQuotas):
            low = draw(st.lists(st.sampled_from([e.index for e in action.members]), unique=True))
            return RaceQuotasRead(now=self.tick(), too_low=tuple((i, "quota is 0") for i in low))
        if isinstance(action, SubmitRace):
            if action.new or not self.race():
                self.ledger.data["race"] = {"try": self.try_number, "winner": None, "members": []}
            race = self.ledger.data["race"]
            for entry in action.members:
                if not any(m["index"] == entry.index for m in race["members"]):
                    race["members"].append({"index": entry.index, "key": None, "job_name": None, "closed": False})
            self.ledger.save()
            refused = []
            for entry in action.members:
                member = next(m for m in race["members"] if m["index"] == entry.index)
                if member.get("job_name"):
                    continue
                if draw(st.integers(0, 6)) == 0:
                    member["closed"] = True
                    self.ledger.save()
                    refused.append((entry.index, "quota", "429"))
                    continue
                if not member.get("key"):
                    member["key"] = f"k{len(self.member_key) + len(self.keys) + 1}-{entry.index}"
                    self.ledger.save()
                assert member["key"] not in self.keys, "a second job under one submission key"
                name = f"projects/p/locations/{entry.location}/customJobs/{len(self.jobs) + 1}"
                self.jobs[name], self.keys[member["key"]], self.member_key[name] = "ACTIVE", name, member["key"]
                if self.crashes < 2 and draw(st.integers(0, 6)) == 0:  # killed between two creates (name unsaved)
                    self.crashes += 1
                    return self.new_try()
                member["job_name"] = name
                self.ledger.save()
            jobs = tuple((m["index"], m["job_name"]) for m in race["members"] if m.get("job_name") and not m["closed"])
            return RaceCreated(now=self.tick(), jobs=jobs, refused=tuple(refused))
        if isinstance(action, WaitForRace):
            names = [w.job_name for w in action.members]
            assert len(set(names)) == len(names), "a member watched twice"
            for w in action.members:
                member = next(m for m in self.race()["members"] if m["index"] == w.index)
                assert member["job_name"] == w.job_name and not member["closed"]
                member.update(running_by=w.running_by, why=w.why)
            self.ledger.save()
            self.ledger = _Ledger(self.store)  # deferred
            return self.race_outcome(action)
        if isinstance(action, Submit):  # a SPOT winner's resubmission: the losers are gone
            assert not self.active, f"a submission while {self.active} trains"
        return super().answer(action)

    def race_outcome(self, action: WaitForRace):
        draw = self.draw
        members = list(action.members)
        outcome = draw(st.sampled_from(["won", "won", "none", "failed", "unreachable", "cleared"]))
        if outcome == "unreachable" and self.outages < 2:
            self.outages += 1
            return RaceEnded(now=self.tick(), winner=None, members=(), error="unreachable", try_number=self.try_number)
        if outcome == "cleared" and self.clears < 2:  # on_kill of the race trigger: every member cancelled
            self.clears += 1
            for w in members:
                if self.jobs[w.job_name] == "ACTIVE":
                    self.jobs[w.job_name] = "JOB_STATE_CANCELLED"
            return self.new_try()
        active = [w for w in members if self.jobs[w.job_name] == "ACTIVE"]
        ended: list[MemberEnded] = []
        if outcome == "won" and active:
            # members start RUNNING at random polls; at the first poll that shows any, the trigger
            # decides by the verdict (race_engine.race_verdict) and cancels what it says, at once
            started = draw(st.lists(st.sampled_from(active), min_size=1, unique_by=lambda w: w.index))
            starts = {w.index: draw(st.integers(0, 2)) for w in started}
            first = min(starts.values())
            seen = [MemberSeen(index=w.index, state="JOB_STATE_RUNNING" if starts.get(w.index) == first else
                               "JOB_STATE_QUEUED", ran=starts.get(w.index) == first, terminal=False, failed=False)
                    for w in active]
            slot, to_cancel = race_verdict(seen, ())
            winner = active[slot]
            assert starts.get(winner.index) == first and winner.index == min(i for i, t in starts.items() if t == first)
            assert sorted(to_cancel) == [s for s in range(len(active)) if s != slot], "every other member cancelled"
            for s in to_cancel:
                self.jobs[active[s].job_name] = "JOB_STATE_CANCELLED"  # by the race, at once
            for w in members:
                if w is not winner:
                    ended.append(MemberEnded(index=w.index, job_name=w.job_name, kind=Event.CANCELLED, by_race=True,
                                             job_state=self.jobs[w.job_name]))
            finish = draw(st.sampled_from([None, None, Event.SUCCEEDED, Event.FAILED]))
            if finish is not None:
                self.jobs[winner.job_name] = "JOB_STATE_SUCCEEDED" if finish is Event.SUCCEEDED else "JOB_STATE_FAILED"
            ended.append(MemberEnded(index=winner.index, job_name=winner.job_name, kind=finish))
            return RaceEnded(now=self.tick(), winner=winner.index, members=tuple(ended), try_number=self.try_number)
        failed = outcome == "failed" and active
        cancelled: tuple[int, ...] = ()
        if failed:  # the first active member fails for its code: the verdict cancels the others, no winner
            seen = [MemberSeen(index=w.index, state="JOB_STATE_FAILED" if n == 0 else "JOB_STATE_QUEUED", ran=False,
                               terminal=n == 0, failed=n == 0) for n, w in enumerate(active)]
            winner_slot, to_cancel = race_verdict(seen, ())
            assert winner_slot is None and sorted(to_cancel) == list(range(1, len(active)))
            cancelled = tuple(active[s].index for s in to_cancel)
        for n, w in enumerate(members):
            if self.jobs[w.job_name] != "ACTIVE":
                kind = Event.CANCELLED
            elif failed and n == members.index(active[0]):
                kind = Event.FAILED
            elif w.index in cancelled:
                kind = Event.CANCELLED  # the trigger cancelled the others
            else:
                kind = draw(st.sampled_from(CAPACITY_KINDS + [Event.CANCELLED]))
            self.jobs[w.job_name] = {Event.FAILED: "JOB_STATE_FAILED", Event.CANCELLED: "JOB_STATE_CANCELLED"}.get(
                kind, "JOB_STATE_FAILED")
            ended.append(MemberEnded(index=w.index, job_name=w.job_name, kind=kind, by_race=bool(failed),
                                     running_bound="why" if kind is Event.CAPACITY_TIMEOUT and w.running_by else None))
        return RaceEnded(now=self.tick(), winner=None, members=tuple(ended), try_number=self.try_number)

    def carry_out(self, effect) -> None:
        if isinstance(effect, CloseMember):
            assert self.jobs[effect.job_name] != "ACTIVE", "a member is recorded once it ended"
            assert effect.job_name not in self.closed_members, "a member recorded twice"
            self.closed_members.add(effect.job_name)
            member = next(m for m in self.race()["members"] if m["index"] == effect.index)
            member["closed"] = True
            self.ledger.data["attempts"] = [*self.ledger.attempts, {"job_name": effect.job_name, "race": effect.race,
                                                                    "position": effect.position,
                                                                    "outcome": effect.outcome}]
            self.ledger.save()
            return
        if isinstance(effect, Won):
            race = self.race()
            assert race["winner"] is None, "a second winner in one race"
            race["winner"] = effect.index
            member = next(m for m in race["members"] if m["index"] == effect.index)
            self.ledger.data.update(job_name=effect.job_name, submission_key=member["key"], job_try=race["try"],
                                    running_bound=None)
            self.ledger.save()
            self.winners.append(effect.job_name)
            return
        super().carry_out(effect)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_races_keep_one_winner_cancel_every_loser_and_advance_only_on_capacity(data):
    plan = data.draw(RACE_PLANS, label="plan")
    world = RaceWorld(data.draw, plan)
    event = TryStarted(now=NOW, try_number=1)
    for _ in range(300):
        action = decide(plan, State.of(world.ledger.data), event)
        race_before = copy.deepcopy(world.race())
        position_before = world.ledger.data.get("position", 0)
        for effect in action.effects:
            world.carry_out(effect)
        won = [e for e in action.effects if isinstance(e, Won)]
        if won:  # every other member still open is closed as lost, in the same decision
            lost = {e.job_name for e in action.effects if isinstance(e, CloseMember) and e.race == "lost"}
            still_open = {m["job_name"] for m in race_before.get("members", [])
                          if m.get("job_name") and not m.get("closed")} - {won[0].job_name}
            assert lost == still_open, (lost, still_open)
        if isinstance(event, RaceEnded) and event.winner is None and \
                any(m.kind is Event.FAILED for m in event.members):  # a member's code failed
            assert isinstance(action, Fail) and action.failure.kind == "TrainingJobFailedNoRetry"
            assert not action.moves and world.ledger.data.get("position", 0) == position_before
        if action.moves and isinstance(event, RaceEnded):
            assert event.winner is None and all(m.kind in (*CAPACITY_KINDS, Event.CANCELLED) for m in event.members)
            assert any(m.kind in CAPACITY_KINDS for m in event.members) or \
                action.moves[0].failure.kind == "DeadlineExceeded", "moved on without a capacity outcome"
            # (a race cancelled by a clear is run anew; past the deadline that new race is skipped)
        if isinstance(action, Fail) and action.failure.kind == "VertexUnreachable":
            event = world.new_try()
            continue
        if isinstance(action, (Succeed, Fail)):
            break
        event = world.answer(action)
    else:
        raise AssertionError("the task never ended")
    assert not world.active, f"the task ended with {world.active} still training"
    closed = [a["job_name"] for a in world.ledger.attempts if a["job_name"]]
    assert sorted(closed) == sorted(world.jobs), "every job submitted is recorded once, as it ended"
    assert len(set(world.member_key.values())) == len(world.member_key), "one job per submission key"
    if isinstance(action, Succeed):
        assert world.ledger.data["completed"] and closed[-1] == action.job_name
        race_attempts = [a for a in world.ledger.attempts if a.get("race") == "lost"]
        assert all(a["job_name"] not in world.winners for a in race_attempts)
