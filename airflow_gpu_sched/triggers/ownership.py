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

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import logging
from typing import Any

WATCH_KEY = "airflow_gpu_sched.watching_try"  # the XCom: the task instance id of the try a trigger watches for
log = logging.getLogger(__name__)


def supervisor_comms() -> Any:
    """The triggerer's channel to its supervisor, or None outside a triggerer (dag.test(), unit tests)."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - Airflow without the task SDK
        return None
    return getattr(task_runner, "SUPERVISOR_COMMS", None)


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


def decide(ti_id: str, state: str | None, watching: Any) -> bool:
    """The decision, no I/O: handed over (leave the job alone) only when the task instance is
    still DEFERRED and the watch XCom names this very try."""
    return state == "deferred" and _as_text(watching) == ti_id


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
    """Record that a copy of this trigger watches the job for this try (best effort)."""
    ti, comms = _ti_of(trigger), supervisor_comms()
    if ti is None or comms is None:
        return
    from airflow.sdk.execution_time.xcom import XCom  # the configured backend, as a task's own XComs

    try:
        await XCom.aset(WATCH_KEY, str(ti.id), dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                        map_index=getattr(ti, "map_index", -1))
    except Exception as exc:  # without it on_kill cancels (the safe side for a user's action)
        log.warning("could not record the watching try (%s): a hand-over to another triggerer may cancel the job",
                    exc)


async def handed_over(trigger: Any) -> bool:
    """True when ``on_kill`` comes from Airflow handing the trigger to another triggerer, not a user."""
    ti, comms = _ti_of(trigger), supervisor_comms()
    if ti is None or comms is None:
        return False
    from airflow.sdk.execution_time.comms import GetTaskStates
    from airflow.sdk.execution_time.xcom import XCom

    try:
        states = await comms.asend(GetTaskStates(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id],
                                                 map_index=_map_index(ti)))
        state = (getattr(states, "task_states", None) or {}).get(ti.run_id, {}).get(_state_key(ti))
        if state != "deferred":
            return False
        watching = await XCom.aget_one(key=WATCH_KEY, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                                       map_index=getattr(ti, "map_index", -1))
    except Exception as exc:  # cannot tell: a user's action is the likelier, cancel as before
        log.warning("could not tell a user's kill from a hand-over (%s): cancelling", exc)
        return False
    return decide(str(ti.id), state, watching)
