"""Whether a trigger's ``on_kill`` is a user's action or Airflow handing the trigger to another triggerer.

Works around an Airflow 3.3 bug (apache/airflow#73454, open; first reported as #41231): when a
triggerer's heartbeat lapses past ``triggerer_health_check_threshold`` (a loaded host, a long GC
pause), ``Trigger.assign_unassigned`` gives its triggers to another triggerer. The first one is
often still alive: at its next assignment check it finds them gone from its list and cancels
them with the *user action* message, so ``on_kill`` runs, and cancelled the job the new owner
had just started watching (seen in the deployed two-triggerer test under load: one job
CANCELLED, its run failed).

Only the metadata database tells the two apart: after a user's mark or clear, the task instance
is no longer DEFERRED on this try; after a hand-over it still is. The try is told by the task
instance's id (Airflow 3 gives each try a new one): every copy of the trigger writes it to an
XCom when it starts (:func:`claim`), and a new try's start clears the task's XComs. So
:func:`handed_over` is true only when the task instance is DEFERRED and the XCom still holds
this try's id; then ``on_kill`` leaves the job to the copy that now runs it. Anything it cannot
read (no triggerer, an error) counts as a user's action: the job is cancelled, as before.

The same hand-over has a second shape (seen in the 1,000-task reliability run, 2026-12-03): the
first triggerer *fired* the trigger's event while lagging, the second had already started a
copy, and the event's resume (task instance SCHEDULED, the trigger row deleted) made Airflow
cancel that copy with the user-action message. The task instance is no longer DEFERRED, so the
rule above took it for a user's kill: harmless for a job that had ended, but a race's event
fires while its winner RUNS, and that copy's ``on_kill`` would cancel the winner the resumed
task goes on with. So every trigger records, just before it yields its event, that this trigger
(its database id, new per deferral) fired (:func:`fired`, XCom :data:`FIRED_KEY`); an ``on_kill``
of a trigger that already fired, while its try still lives (scheduled, queued, running, deferred
again, up for retry), is not a kill: nothing is cancelled. A try marked failed or success, or
cleared, still cancels. The XCom is written before the event, so an event Airflow delivered
always has it (or a warning in the log, and the old rule).

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import logging
from typing import Any

WATCH_KEY = "airflow_gpu_sched.watching_try"  # the XCom: the task instance id of the try a trigger watches for
FIRED_KEY = "airflow_gpu_sched.fired_trigger"  # the XCom: the id of the trigger that fired its event last
# The states of a try that goes on after its trigger's event (resumed, re-deferred, or failed for
# a retry that re-attaches): a copy of the fired trigger cancelled in them was not killed by a user.
LIVE_AFTER_EVENT = frozenset({"scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule"})
log = logging.getLogger(__name__)


def supervisor_comms() -> Any:
    """The triggerer's channel to its supervisor, or None outside a triggerer (dag.test(), unit tests)."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - Airflow without the task SDK
        return None
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    # `airflow dags test` and dag.test() run a trigger inline, with the task's InProcessSupervisorComms,
    # which has no asend: no triggerer there. Each reaper pass warned that it could not read the
    # task states, in the one mode users try first (issue 41); now the pass is not made.
    return comms if hasattr(comms, "asend") else None


def _ti_of(trigger: Any) -> Any:
    if getattr(trigger, "trigger_id", None) is None:
        return None  # run inline (dag.test()): no triggerer, no hand-over
    ti = getattr(trigger, "task_instance", None)
    return ti if getattr(ti, "id", None) is not None and getattr(ti, "dag_id", None) else None


def _map_index(ti: Any) -> int | None:
    index = getattr(ti, "map_index", -1)
    return None if index is None or index < 0 else int(index)


def _state_key(ti: Any) -> str:
    index = _map_index(ti)
    return ti.task_id if index is None else f"{ti.task_id}_{index}"  # how Airflow keys mapped tasks' states


def decide(ti_id: str, state: str | None, watching: Any, trigger_id: Any = None, fired_trigger: Any = None) -> bool:
    """The decision, no I/O: not a user's kill (leave the job alone) when the task instance is
    still DEFERRED and the watch XCom names this very try (a hand-over), or when this very trigger
    already fired and its try still lives (a copy cancelled by the event's resume)."""
    if state == "deferred" and _as_text(watching) == ti_id:
        return True
    return (trigger_id is not None and _as_text(fired_trigger) == str(trigger_id)
            and state in LIVE_AFTER_EVENT)


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        import json

        try:  # XCom values come back JSON-encoded through some paths
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, str) else value
    return None


async def claim(trigger: Any) -> None:
    """Record that a copy of this trigger watches the job for this try (best effort: without it
    on_kill cancels, the safe side for a user's action)."""
    ti = _ti_of(trigger)
    await _record(trigger, WATCH_KEY, str(getattr(ti, "id", "")),
                  "the watching try: a hand-over to another triggerer may cancel the job")


async def fired(trigger: Any) -> None:
    """Record, just before the trigger yields its event, that this trigger fired (best effort:
    without it a late copy's on_kill cancels, the rule before this record)."""
    await _record(trigger, FIRED_KEY, str(getattr(trigger, "trigger_id", "")),
                  "that this trigger fired: a copy of it on another triggerer may cancel the job when the task "
                  "resumes")


async def _record(trigger: Any, key: str, value: str, what: str) -> None:
    """One XCom of the trigger's task instance, through the triggerer's channel; a failure is logged."""
    ti, comms = _ti_of(trigger), supervisor_comms()
    if ti is None or comms is None:
        return
    from airflow_gpu_sched import compat  # the configured backend, as a task's own XComs

    try:
        await compat.xcom_aset(key, value, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                        map_index=getattr(ti, "map_index", -1))
    except Exception as exc:
        log.warning("could not record %s (%s)", what, exc)


async def handed_over(trigger: Any) -> bool:
    """True when ``on_kill`` comes from Airflow handing the trigger to another triggerer (or from
    the resume of an event this trigger already fired), not from a user."""
    ti, comms = _ti_of(trigger), supervisor_comms()
    if ti is None or comms is None:
        return False
    from airflow.sdk.execution_time.comms import GetTaskStates

    from airflow_gpu_sched import compat

    try:
        states = await comms.asend(GetTaskStates(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id],
                                                 map_index=_map_index(ti)))
        state = (getattr(states, "task_states", None) or {}).get(ti.run_id, {}).get(_state_key(ti))
        if state not in LIVE_AFTER_EVENT:
            return False  # marked failed/success, or cleared: a user's kill
        where = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                 "map_index": getattr(ti, "map_index", -1)}
        watching = await compat.xcom_aget_one(key=WATCH_KEY, **where) if state == "deferred" else None
        fired_trigger = await compat.xcom_aget_one(key=FIRED_KEY, **where)
    except Exception as exc:  # cannot tell: a user's action is the likelier, cancel as before
        log.warning("could not tell a user's kill from a hand-over (%s): cancelling", exc)
        return False
    return decide(str(ti.id), state, watching, trigger.trigger_id, fired_trigger)
