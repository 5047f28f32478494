"""The trigger loop a task runs in its worker (``deferrable=False``: ``running.first_event``) ends
on Airflow's ``execution_timeout`` whatever the loop is doing when the alarm comes.

Airflow's task runner wraps ``execute`` in ``airflow.sdk.execution_time.timeout.timeout``: SIGALRM
raises AirflowTaskTimeout from a handler in the main thread. With the loop in the main thread, an
alarm that came while one of the loop's tasks was running (the shared poller parsing a page, a log
tail) raised inside that task, which kept the exception as its result: the wait went on, the job
too (found in a loaded ``make check``: ``airflow dags test`` of a sync task past its
``execution_timeout`` still polling minutes later). Here the task holds the loop when the alarm
comes, every time.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout
from airflow.sdk.execution_time.timeout import timeout
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_sched.operators.running import first_event


class BusyLoopTrigger(BaseTrigger):
    """A background task holds the loop for 3 s; the event comes after 4 s."""

    def serialize(self):
        return (f"{__name__}.BusyLoopTrigger", {})

    async def run(self):
        async def hold_the_loop() -> None:
            end = time.monotonic() + 3.0
            while time.monotonic() < end:  # no await: the alarm's handler runs in this task's step
                pass

        holder = asyncio.get_running_loop().create_task(hold_the_loop())
        await asyncio.sleep(4.0)
        yield TriggerEvent({"status": "came after the timeout", "holder_done": holder.done()})


def test_execution_timeout_ends_the_workers_trigger_loop_while_a_task_holds_it():
    started = time.monotonic()
    with pytest.raises(AirflowTaskTimeout):
        with timeout(1):  # Airflow's own: SIGALRM after 1 s, inside the 3 s the task holds the loop
            event = first_event(BusyLoopTrigger())
            pytest.fail(f"the wait outlived execution_timeout and returned {event}")
    assert time.monotonic() - started < 60  # a hang guard: the loop's close is bounded
