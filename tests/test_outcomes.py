"""The one classifier: preemption and capacity expiry told apart from user-code failures."""

from __future__ import annotations

import pytest

from airflow_gpu_sched.models import CustomJob, Status
from airflow_gpu_sched.outcomes import JOB_EVENTS, Event, classify_failure, event_for_job, validate_event


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
    ("JOB_STATE_EXPIRED", Event.FAILED), ("JOB_STATE_PARTIALLY_SUCCEEDED", Event.FAILED),
])
def test_terminal_states_map_to_events(state, expected):
    job = CustomJob(name="projects/p/locations/l/customJobs/1", state=state)
    assert event_for_job(job)["status"] == expected.value


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
