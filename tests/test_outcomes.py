"""The one classifier: preemption and capacity expiry told apart from user-code failures."""

from __future__ import annotations

import json

from datetime import datetime, timedelta, timezone

import pytest

from airflow_gpu_sched.orchestration import failure_patterns
from airflow_gpu_sched.orchestration.outcomes import (
    JOB_EVENTS,
    CancelCause,
    Event,
    cancel_cause,
    classify_failure,
    event_for_job,
    validate_event,
)
from airflow_gpu_sched.vertex.models import CustomJob, Status
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp


def _info(reason: str) -> list[dict]:
    return [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "aiplatform.googleapis.com"}]


CASES = [
    ("emulator-stockout", Status(code=8, message="The job was preempted 7 times: Spot VM capacity was reclaimed "
                                 "(STOCKOUT) and the service gave up after 6 restarts.", details=_info("STOCKOUT")),
     Event.PREEMPTED),
    ("vertex-stockout-message-only", Status(code=13, message="Job failed due to STOCKOUT: the zone does not have "
                                            "enough resources available to fulfill the request."), Event.PREEMPTED),
    ("vertex-preempted-message", Status(code=14, message="The replica workerpool0-0 was preempted."), Event.PREEMPTED),
    ("resources-insufficient", Status(code=8, message="Resources are insufficient in region: us-central1. Please try a "
                                      "different region."), Event.PREEMPTED),
    ("emulator-flex-wait", Status(code=4, message="The job could not get its resources (8 x NVIDIA_H100_80GB in "
                                  "us-central1) within scheduling.maxWaitDuration (7200s): the FLEX_START capacity "
                                  "wait expired.", details=_info("FLEX_START_WAIT_EXPIRED")), Event.CAPACITY_TIMEOUT),
    ("flex-wait-message-only", Status(code=4, message="Job could not be scheduled within the max_wait_duration."),
     Event.CAPACITY_TIMEOUT),
    ("user-code-exit", Status(code=3, message="The replica workerpool0-0 exited with a non-zero status of 1. To find "
                              "out more about why your job exited please check the logs: https://console.cloud.google.com/logs"),
     Event.FAILED),
    ("user-code-mentions-preemption", Status(code=3, message="The replica workerpool0-0 exited with a non-zero status "
                                             "of 137. Termination reason: preempted? no: OOMKilled"), Event.FAILED),
    ("quota", Status(code=8, message="The following quota metrics exceed quota limits: "
                     "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"), Event.QUOTA_EXCEEDED),
    ("timeout", Status(code=4, message="The job ran longer than scheduling.timeout (600s).", details=_info("JOB_TIMEOUT")),
     Event.FAILED),
    ("no-error", None, Event.FAILED),
]


@pytest.mark.parametrize("error, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classify_failure(error, expected):
    assert classify_failure(error) is expected


@pytest.mark.parametrize("state, expected", [
    ("JOB_STATE_SUCCEEDED", Event.SUCCEEDED), ("JOB_STATE_CANCELLED", Event.CANCELLED),
    ("JOB_STATE_EXPIRED", Event.CAPACITY_TIMEOUT), ("JOB_STATE_PARTIALLY_SUCCEEDED", Event.FAILED),
])
def test_terminal_states_map_to_events(state, expected):
    job = CustomJob(name="projects/p/locations/l/customJobs/1", state=state)
    assert event_for_job(job)["status"] == expected.value


def _times(*states):
    from airflow_gpu_sched.orchestration import state_times

    times = state_times.new()
    for n, state in enumerate(states):
        job = CustomJob(name="projects/p/locations/l/customJobs/1", state=state,
                        updateTime=f"2026-01-01T00:0{n}:00Z")
        state_times.note(times, job, 1000.0 + n)
    return times


def test_an_expired_job_seen_running_is_not_a_capacity_outcome():
    job = CustomJob(name="projects/p/locations/l/customJobs/1", state="JOB_STATE_EXPIRED",
                    startTime="2026-01-01T00:00:00Z")
    assert event_for_job(job, times=_times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"))["status"] == Event.FAILED.value


def test_an_expired_job_with_a_start_time_but_never_seen_running_is_a_capacity_outcome():
    """Real Vertex sets startTime at admission: it does not say the job ran."""
    job = CustomJob(name="projects/p/locations/l/customJobs/1", state="JOB_STATE_EXPIRED",
                    createTime="2026-01-01T00:00:00Z", startTime="2026-01-01T00:00:00.140Z")
    assert event_for_job(job)["status"] == Event.CAPACITY_TIMEOUT.value
    assert event_for_job(job, times=_times("JOB_STATE_QUEUED"))["status"] == Event.CAPACITY_TIMEOUT.value


def _flex_cancelled(ended_after: timedelta, max_wait: str | None = "1800s") -> CustomJob:
    scheduling = {"strategy": "FLEX_START", **({"maxWaitDuration": max_wait} if max_wait else {})}
    return CustomJob.model_validate({
        "name": "projects/p/locations/l/customJobs/1", "state": "JOB_STATE_CANCELLED",
        "createTime": "2026-01-01T00:00:00Z", "startTime": "2026-01-01T00:00:00.140Z",
        "endTime": format_timestamp(datetime(2026, 1, 1, tzinfo=timezone.utc) + ended_after),
        "error": {"code": 1, "message": "CANCELED"},
        "jobSpec": {"workerPoolSpecs": [], "scheduling": scheduling}})


def test_a_cancelled_flex_start_job_is_the_wait_s_expiry_only_by_the_service_s_clock_and_never_when_ours():
    """The one rule (outcomes.cancel_cause), issue 37: a CANCELLED we caused is never the service's
    expiry, and an expiry is told by the job's own createTime/endTime against its maxWaitDuration."""
    waited = _times("JOB_STATE_QUEUED")
    expired = _flex_cancelled(timedelta(minutes=30))  # endTime - createTime = maxWaitDuration
    assert cancel_cause(expired, waited, ours=False) is CancelCause.WAIT_EXPIRED
    event = event_for_job(expired, times=waited)
    assert event["status"] == Event.CAPACITY_TIMEOUT.value and event["cancelled_waiting"] is True
    # our cancel (on_kill, a bound, a lost race): ours, even at the very instant the wait ran out
    assert cancel_cause(expired, waited, ours=True) is CancelCause.OURS
    assert event_for_job(expired, times=waited, ours=True)["status"] == Event.CANCELLED.value
    # seen waiting, then CANCELLED 50 s in (the kill of issue 37): someone cancelled it, not the service
    early = _flex_cancelled(timedelta(seconds=50))
    assert cancel_cause(early, waited, ours=False) is CancelCause.UNKNOWN
    assert event_for_job(early, times=waited)["status"] == Event.CANCELLED.value
    # no maxWaitDuration on the job: the documented default (1 day) is the wait it was given
    assert cancel_cause(_flex_cancelled(timedelta(minutes=30), None), waited, ours=False) is CancelCause.UNKNOWN
    assert cancel_cause(_flex_cancelled(timedelta(days=1), None), waited, ours=False) is CancelCause.WAIT_EXPIRED
    assert cancel_cause(_flex_cancelled(timedelta(days=9), "0s"), waited, ours=False) is CancelCause.UNKNOWN
    # seen RUNNING: it got its capacity, so the end is no wait's; not watched: no claim
    ran = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")
    assert cancel_cause(expired, ran, ours=False) is CancelCause.UNKNOWN
    assert cancel_cause(expired, None, ours=False) is CancelCause.UNKNOWN
    assert event_for_job(expired)["status"] == Event.CANCELLED.value


def test_a_job_cancelled_at_its_timeout_is_a_timeout_failure():
    job = CustomJob.model_validate({
        "name": "projects/p/locations/l/customJobs/1", "state": "JOB_STATE_CANCELLED",
        "createTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:11:00Z",
        "error": {"code": 1, "message": "CANCELED"},
        "jobSpec": {"workerPoolSpecs": [], "scheduling": {"timeout": "600s"}}})
    times = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")  # RUNNING seen at 00:01:00
    event = event_for_job(job, times=times)
    assert event["status"] == Event.FAILED.value and event["timed_out"] is True
    early = job.model_copy(update={"end_time": job.end_time - timedelta(minutes=5)})
    assert event_for_job(early, times=times)["status"] == Event.CANCELLED.value  # a cancel mid-run: not the timeout


# ---------------------------------------------------------------------------- user patterns (config)

UNKNOWN = Status(code=13, message="Zonal capacity for the accelerator was repurposed; please resubmit.")


@pytest.fixture
def patterns_option(monkeypatch):
    """Set ``[gpu_sched] failure_patterns`` the way a deployment does (Airflow reads env vars)."""
    def set_option(value):
        monkeypatch.setenv(failure_patterns.ENV_VAR, value)
        failure_patterns.reload()
    yield set_option
    monkeypatch.delenv(failure_patterns.ENV_VAR, raising=False)
    failure_patterns.reload()


def test_a_message_the_built_ins_do_not_know_becomes_preempted_once_configured(patterns_option):
    assert classify_failure(UNKNOWN) is Event.FAILED  # the built-ins: never resubmitted
    patterns_option(json.dumps({"preempted": [r"capacity .* was repurposed"]}))
    assert classify_failure(UNKNOWN) is Event.PREEMPTED
    # the built-ins still hold alongside
    assert classify_failure(Status(code=8, message="The following quota metrics exceed quota limits: x")) \
        is Event.QUOTA_EXCEEDED


def test_user_patterns_are_checked_first_and_match_reasons(patterns_option):
    patterns_option(json.dumps({"failed": ["^Resources are insufficient"], "capacity_timeout": ["^QUEUE_TTL$"]}))
    assert classify_failure(Status(code=8, message="Resources are insufficient in region: us-central1")) is Event.FAILED
    assert classify_failure(Status(code=4, message="gone", details=_info("QUEUE_TTL"))) is Event.CAPACITY_TIMEOUT


@pytest.mark.parametrize("value, words", [
    ("{not json", "not valid JSON"), ('["x"]', "must be a JSON object"), ('{"stockout": ["x"]}', "unknown kind 'stockout'"),
    ('{"preempted": "x"}', "must be a list"), ('{"preempted": ["(unclosed"]}', "not a valid regex"),
], ids=["bad-json", "not-object", "unknown-kind", "not-list", "bad-regex"])
def test_a_bad_option_is_a_clear_error_naming_it(patterns_option, value, words):
    patterns_option(value)
    with pytest.raises(failure_patterns.FailurePatternsError, match=words) as raised:
        classify_failure(UNKNOWN)
    assert "[gpu_sched] failure_patterns" in str(raised.value) and failure_patterns.ENV_VAR in str(raised.value)


def test_a_running_job_has_no_event():
    with pytest.raises(ValueError, match="still"):
        event_for_job(CustomJob(name="x", state="JOB_STATE_RUNNING"))


@pytest.mark.parametrize("event, words", [
    (None, "malformed"), ({"state": "succeeded"}, "malformed"), ({"status": "exploded"}, "unknown"),
    ({"status": "capacity_available"}, "not one of"), ({"status": "succeeded"}, "carries no job"),
], ids=["none", "no-status", "unknown", "wrong-set", "no-job"])
def test_validate_event_rejects_what_the_operator_cannot_use(event, words):
    with pytest.raises(ValueError, match=words):
        validate_event(event, JOB_EVENTS)


@pytest.mark.parametrize("pattern, words", [
    (r"(a+)+$", "a quantifier inside a quantified group"),
    (r"(x|xx)+y", "an alternation under a quantifier"),
    (r"\w+\s+\w+ failed", "unbounded quantifiers"),
], ids=["nested", "alternation", "polynomial"])
def test_a_pattern_that_can_backtrack_for_ever_is_refused_when_the_option_is_read(patterns_option, pattern, words):
    """Matching runs in the triggerer's event loop: a ReDoS pattern would stall every trigger."""
    patterns_option(json.dumps({"preempted": [pattern]}))
    with pytest.raises(failure_patterns.FailurePatternsError, match=words):
        classify_failure(Status(code=13, message="a" * 100_000 + "!"))


def test_patterns_read_a_capped_message(patterns_option):
    """The first MESSAGE_CAP characters only (documented): a phrase past them is not read."""
    patterns_option(json.dumps({"preempted": [r"capacity .* was repurposed"]}))
    cap = failure_patterns.MESSAGE_CAP
    head = "Zonal capacity for the accelerator was repurposed. "
    assert classify_failure(Status(code=13, message=head + "x" * 10 * cap)) is Event.PREEMPTED
    assert classify_failure(Status(code=13, message="x" * cap + head)) is Event.FAILED  # past the cap
    assert classify_failure(Status(code=13, message="x" * cap + "exited with a non-zero status of 1")) is Event.FAILED
    assert classify_failure(Status(code=13, message="capacity " + "y" * 1_000_000)) is Event.FAILED  # no stall


def test_a_flex_start_job_first_seen_cancelled_at_its_max_wait_is_a_capacity_outcome():
    """The watch came late (a triggerer restart, a slow start) and saw only the end: the end at
    maxWaitDuration after the create still tells the service ended the wait."""
    job = CustomJob.model_validate({
        "name": "projects/p/locations/l/customJobs/1", "state": "JOB_STATE_CANCELLED",
        "createTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:10:00Z",
        "error": {"code": 1, "message": "CANCELED"},
        "jobSpec": {"workerPoolSpecs": [], "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "600s"}}})
    assert event_for_job(job, times=_times("JOB_STATE_CANCELLED"))["status"] == Event.CAPACITY_TIMEOUT.value
    early = job.model_copy(update={"end_time": job.end_time - timedelta(minutes=5)})
    assert event_for_job(early, times=_times("JOB_STATE_CANCELLED"))["status"] == Event.CANCELLED.value


# ---------------------------------------------------------------------------- a cancel that ends FAILED or SUCCEEDED
# job_state.proto: CANCELLING "may only go to either JOB_STATE_SUCCEEDED, JOB_STATE_FAILED or
# JOB_STATE_CANCELLED" (the emulator's variant cancelOutcome).

SIGTERM_EXIT = "The replica workerpool0-0 exited with a non-zero status of 143 (SIGTERM)."


def _failed(message: str, **extra) -> CustomJob:
    return CustomJob.model_validate({"name": "projects/p/locations/l/customJobs/1", "state": "JOB_STATE_FAILED",
                                     "createTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:10:00Z",
                                     "error": {"code": 3, "message": message}, **extra})


def test_a_job_seen_cancelling_that_ended_failed_is_cancelled_not_the_users_failure():
    from airflow_gpu_sched.orchestration.outcomes import cancel_ended

    times = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING")
    event = event_for_job(_failed(SIGTERM_EXIT), times=times)
    assert event["status"] == Event.CANCELLED.value and event["cancel_ended"] == "JOB_STATE_FAILED"
    assert cancel_ended(_failed(SIGTERM_EXIT), times)
    # the same error with no cancel seen, none of ours and no cancel wording: the user's code
    unseen = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")
    assert event_for_job(_failed(SIGTERM_EXIT), times=unseen)["status"] == Event.FAILED.value
    # a job we cancelled (cancel_ended asks about our cancel): any exit the user's code would own is the cancel's
    assert cancel_ended(_failed("The replica workerpool0-0 exited with a non-zero status of 1."), unseen)


def test_a_failed_end_is_the_cancels_when_we_cancelled_it_or_its_error_says_so():
    unseen = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")  # the poll missed CANCELLING
    assert event_for_job(_failed(SIGTERM_EXIT), times=unseen, ours=True)["status"] == Event.CANCELLED.value
    said = _failed("The replica workerpool0-0 exited with a non-zero status of 143 (SIGTERM) while the job "
                   "was being cancelled.")
    assert event_for_job(said, times=unseen)["status"] == Event.CANCELLED.value
    assert event_for_job(said)["status"] == Event.CANCELLED.value  # found ended: the wording alone tells


def test_a_cancelled_job_keeps_a_capacity_kind_and_a_success_stays_a_success():
    from airflow_gpu_sched.orchestration.outcomes import cancel_ended

    cancelling = _times("JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING")
    stockout = _failed("The job was preempted 4 times: Spot VM capacity was reclaimed (STOCKOUT).")
    assert event_for_job(stockout, times=cancelling, ours=True)["status"] == Event.PREEMPTED.value
    assert not cancel_ended(stockout, cancelling)
    done = CustomJob(name="projects/p/locations/l/customJobs/1", state="JOB_STATE_SUCCEEDED")
    event = event_for_job(done, times=cancelling, ours=True)
    assert event["status"] == Event.SUCCEEDED.value and event["cancel_ended"] == "JOB_STATE_SUCCEEDED"
    assert "cancel_ended" not in event_for_job(done, times=_times("JOB_STATE_RUNNING"))
    assert not cancel_ended(done, cancelling)  # it completed despite the cancel: its output is used


def test_a_job_the_cancel_ended_failed_ran_so_its_gpu_time_counts():
    from airflow_gpu_sched.orchestration import state_times

    job = _failed(SIGTERM_EXIT)
    span = state_times.running_span(job, _times("JOB_STATE_QUEUED"), Event.CANCELLED.value)
    assert span is not None and span["source"] == "end"  # RUNNING unseen, but only a running container exits 143
    cancelled = CustomJob.model_validate({**job.model_dump(by_alias=True, exclude_none=True),
                                          "state": "JOB_STATE_CANCELLED"})
    assert state_times.running_span(cancelled, _times("JOB_STATE_QUEUED"), Event.CANCELLED.value) is None


def test_the_process_record_of_stops_and_cancels_is_per_try_and_bounded():
    """orchestration/stops.py: a stopped try refuses; another try (a retry) of the same task does
    not; a long-lived triggerer keeps the newest KEPT cancels only."""
    from airflow_gpu_sched.orchestration import stops

    stops.forget()
    key = ("dag", "run", "train", -1, 1)
    stops.check(key, "creating")  # not stopped: no error
    stops.stop(key)
    with pytest.raises(stops.TryStopped, match="told to stop.*not creating"):
        stops.check(key, "creating")
    stops.check(("dag", "run", "train", -1, 2), "creating")  # the retry is a try of its own
    for n in range(stops.KEPT + 1):
        stops.note_cancel(f"projects/p/locations/l/customJobs/{n}")
    assert not stops.cancelled_here("projects/p/locations/l/customJobs/0")
    assert stops.cancelled_here(f"projects/p/locations/l/customJobs/{stops.KEPT}")
    stops.forget()
