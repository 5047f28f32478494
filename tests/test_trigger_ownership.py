"""on_kill tells a user's kill from Airflow handing the trigger to another triggerer
(apache/airflow#73454; airflow_gpu_sched/triggers/ownership.py), at the wire: the job is on the
emulator, and Airflow's triggerer channel (the supervisor's answers to GetTaskStates, GetXCom
and SetXCom) is played by a small in-memory supervisor holding the task's state and XComs.
The deployed case is tests/e2e/test_deployed.py::test_a_triggerer_paused_past_its_health_check_...
A copy cancelled by the resume of an event its trigger already fired (the 1,000-task reliability
run of 2026-12-03: a lagging triggerer fired, another had started a copy) is the second shape.
"""

from __future__ import annotations

import types
import uuid

import pytest
import requests
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import GetTaskStates, GetXCom, SetXCom, TaskStatesResult, XComResult

from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers import settle
from airflow_gpu_sched.triggers.ownership import FIRED_KEY, WATCH_KEY, claim, decide, handed_over
from tests.test_triggers import _create, _first, _job


class Supervisor:
    """The triggerer supervisor's side of the channel: the task instance's state and XComs."""

    def __init__(self, state: str = "deferred", fail: bool = False):
        self.state, self.fail, self.xcoms, self.seen = state, fail, {}, []

    async def asend(self, msg):
        if type(msg).__name__ == "MaskSecret":  # the connection's secrets, masked in logs: not ours to check
            return None
        self.seen.append(type(msg).__name__)
        if self.fail:
            raise ConnectionResetError("supervisor gone")
        if isinstance(msg, GetTaskStates):
            return TaskStatesResult(task_states={msg.run_ids[0]: {msg.task_ids[0]: self.state}})
        if isinstance(msg, SetXCom):
            self.xcoms[(msg.run_id, msg.task_id, msg.map_index, msg.key)] = msg.value
            return None
        if isinstance(msg, GetXCom):
            return XComResult(key=msg.key, value=self.xcoms.get((msg.run_id, msg.task_id, msg.map_index, msg.key)))
        raise AssertionError(f"unexpected message {msg!r}")


@pytest.fixture
def supervisor(monkeypatch):
    sup = Supervisor()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", sup, raising=False)
    return sup


def _in_triggerer(trigger: CustomJobTrigger, ti_id: str | None = None) -> CustomJobTrigger:
    """As the triggerer sets a trigger up: its id and its task instance (this try's id)."""
    trigger.trigger_id = 7
    trigger.task_instance = types.SimpleNamespace(id=ti_id or str(uuid.uuid4()), dag_id="d", run_id="r",
                                                  task_id="train", map_index=-1, try_number=1)
    return trigger


def test_the_decision():
    assert decide("a", "deferred", "a")  # still deferred on this try: handed over
    assert decide("a", "deferred", '"a"')  # as JSON text
    assert not decide("a", "failed", "a")  # marked failed (or success): a user's kill
    assert not decide("a", "deferred", "b")  # cleared, and a later try deferred again
    assert not decide("a", "deferred", None)  # cleared: the new try's start dropped the XCom
    assert not decide("a", None, "a")
    # this trigger (id 7) fired, and its try goes on: a late copy's on_kill is not a kill
    for state in ("scheduled", "queued", "running", "deferred", "up_for_retry"):
        assert decide("a", state, None, 7, "7") and decide("a", state, None, 7, '"7"')
    for state in ("failed", "success", None, "restarting"):  # marked, or cleared: a kill
        assert not decide("a", state, None, 7, "7")
    assert not decide("a", "scheduled", None, 7, "6")  # another deferral's trigger fired
    assert not decide("a", "scheduled", None, 7, None)
    assert not decide("a", "scheduled", None, None, None)


async def test_a_trigger_handed_over_leaves_the_job_running(fast_emulator, supervisor):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    trigger = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    await claim(trigger)  # the copy on the first triggerer started
    assert list(supervisor.xcoms.values()) == [trigger.task_instance.id]
    assert list(supervisor.xcoms)[0][3] == WATCH_KEY
    await trigger.on_kill()  # Airflow 3.3 on the resumed first triggerer
    assert fast_emulator.stats()["cancels"] == 0
    assert requests.get(f"{fast_emulator.url}/v1/{name}", timeout=5).json()["state"] not in (
        "JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")


@pytest.mark.parametrize("state", ["failed", "success", "scheduled", "running", None])
async def test_a_user_kill_cancels(fast_emulator, supervisor, state):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    trigger = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    await claim(trigger)
    supervisor.state = state  # marked failed/success, or cleared and on its way to a new try
    await trigger.on_kill()
    assert fast_emulator.stats()["cancels"] == 1


async def test_a_clear_whose_next_try_deferred_again_still_cancels(fast_emulator, supervisor):
    """Try 2 re-attached and deferred before try 1's on_kill ran: the XCom names try 2's id."""
    name = _create(fast_emulator, _job(run_seconds=10_000))
    first = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    await claim(first)
    await claim(_in_triggerer(CustomJobTrigger(name, poll_interval=0.05)))  # try 2's copy: a new id
    assert await handed_over(first) is False
    await first.on_kill()
    assert fast_emulator.stats()["cancels"] == 1


async def test_when_the_channel_fails_on_kill_cancels_as_before(fast_emulator, supervisor):
    name = _create(fast_emulator, _job(run_seconds=10_000))
    trigger = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    supervisor.fail = True
    await claim(trigger)  # best effort: logged, not raised
    await trigger.on_kill()
    assert fast_emulator.stats()["cancels"] == 1


async def test_run_inline_asks_nothing(fast_emulator, supervisor):
    """dag.test() runs triggers in the task's process (no trigger id): no hand-over, no question."""
    name = _create(fast_emulator, _job(run_seconds=10_000))
    trigger = CustomJobTrigger(name, poll_interval=0.05)
    await claim(trigger)
    await trigger.on_kill()
    assert supervisor.seen == [] and fast_emulator.stats()["cancels"] == 1


@pytest.mark.parametrize("state, cancels", [("deferred", 0), ("failed", 2), (None, 2)])
async def test_a_race_handed_over_leaves_its_members_and_a_user_kill_cancels_every_one(fast_emulator, supervisor,
                                                                                      state, cancels):
    """The race trigger has the same exposure as the job trigger (apache/airflow#73454)."""
    from airflow_gpu_sched.triggers import RaceTrigger

    names = [_create(fast_emulator, _job(run_seconds=10_000)), _create(fast_emulator, _job(run_seconds=10_000))]
    trigger = _in_triggerer(RaceTrigger(names, poll_interval=0.05))
    await claim(trigger)
    supervisor.state = state
    await trigger.on_kill()
    assert fast_emulator.stats()["cancels"] == cancels


@pytest.fixture
def no_settle(monkeypatch):
    monkeypatch.setattr(settle, "SETTLE_SECONDS", 0.0)  # the triggers run "in a triggerer" (trigger_id set)


@pytest.mark.parametrize("state, winner_cancelled", [
    ("scheduled", False), ("queued", False), ("running", False), ("deferred", False), ("up_for_retry", False),
    ("failed", True), ("success", True), (None, True)])
async def test_a_late_copy_of_a_race_that_fired_leaves_the_winner_the_task_resumes_with(
        fast_emulator, supervisor, no_settle, state, winner_cancelled):
    """The race fires while its winner RUNS; a copy of the same trigger (same id, same try) that
    another triggerer started before the event was delivered is cancelled by the resume with the
    user-action message. The try goes on (SCHEDULED ... DEFERRED again on the winner): its on_kill
    must not cancel the winner. Marked failed/success or cleared, it still cancels every member.
    On main before the fix (f4bd33a), every state here but "deferred" cancelled the winner."""
    from airflow_gpu_sched.triggers import RaceTrigger

    names = [_create(fast_emulator, _job(run_seconds=10_000)), _create(fast_emulator, _job(run_seconds=10_000))]
    ti_id = str(uuid.uuid4())
    first = _in_triggerer(RaceTrigger(names, poll_interval=0.05), ti_id)
    late = _in_triggerer(RaceTrigger(names, poll_interval=0.05), ti_id)
    await claim(late)  # the copy on the second triggerer started before the event was delivered
    event = await _first(first)  # the first triggerer's copy decides the race and fires
    assert event["status"] == "race_won"
    winner = names[event["winner"]]
    assert supervisor.xcoms[("r", "train", -1, FIRED_KEY)] == "7"
    cancels_by_the_race = fast_emulator.stats()["cancels"]
    supervisor.state = state  # the event resumed the task (or a user acted)
    await late.on_kill()
    winner_state = requests.get(f"{fast_emulator.url}/v1/{winner}", timeout=5).json()["state"]
    assert (winner_state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")) is winner_cancelled, winner_state
    assert fast_emulator.stats()["cancels"] == cancels_by_the_race + (1 if winner_cancelled else 0)


async def test_a_late_copy_of_a_job_trigger_that_fired_cancels_nothing(fast_emulator, supervisor, no_settle):
    """The job trigger has the same second shape (an ended job: a cancel would be refused; a
    trigger that fired with the job still running, an unreachable-API error, would lose it)."""
    name = _create(fast_emulator, _job(run_seconds=0))
    first = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    late = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05), first.task_instance.id)
    await claim(late)
    assert (await _first(first))["status"] == "succeeded"
    supervisor.state = "scheduled"
    assert await handed_over(late) is True
    supervisor.state = "failed"
    assert await handed_over(late) is False


async def test_a_new_deferral_of_the_same_try_is_not_covered_by_the_last_ones_event(fast_emulator, supervisor,
                                                                                    no_settle):
    """The fired XCom names the trigger (new per deferral): the next trigger of the same try,
    killed by a user while its try is running again, still cancels."""
    name = _create(fast_emulator, _job(run_seconds=0))
    first = _in_triggerer(CustomJobTrigger(name, poll_interval=0.05))
    await _first(first)
    running = _create(fast_emulator, _job(run_seconds=10_000))
    second = _in_triggerer(CustomJobTrigger(running, poll_interval=0.05), first.task_instance.id)
    second.trigger_id = 8
    await claim(second)
    supervisor.state = "running"  # not deferred: a user's clear of a running try goes this way too
    await second.on_kill()
    assert fast_emulator.stats()["cancels"] == 1
