"""What this process was told to stop, and the cancels it sent: the record that keeps a killed
try from going on (issue 37: a SIGTERM's ``on_kill`` cancelled a FLEX_START job, the trigger
still running in the same process read that CANCELLED as Google's expiry, and the plan moved on
to submit a SPOT job nobody watched).

- :func:`stop` is called first thing by the operator's ``on_kill`` (SIGTERM, ``execution_timeout``,
  a kill of ``airflow dags test``): from then on that try creates no job and moves no plan
  (:func:`check`, called by the run loop before every decision it carries out);
- :func:`note_cancel` is called for every cancel this process sends (``on_kill``, a trigger's
  ``on_kill``, a bound's cancel, a lost race): a job it names ended CANCELLED by us, never by the
  service (:func:`outcomes.cancel_cause`).

Process-wide on purpose: in ``airflow dags test`` and with ``deferrable=False`` the trigger runs
in the process that received the signal, and the operator object that ran ``on_kill`` is not the
one that resumes. A try is named by its task instance key and try number, so a retry (a new try)
is not stopped by its predecessor's kill. The durable part (the ledger's ``cancelled`` names) is
kept by :mod:`.ledger` for a later try in another process.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

TryKey = tuple[str, str, str, int, int]  # dag_id, run_id, task_id, map_index, try_number
KEPT = 10_000  # the newest records kept (a triggerer runs for months): a cancel is read within minutes

_lock = threading.Lock()
_stopped: OrderedDict[TryKey, None] = OrderedDict()
_cancelled: OrderedDict[str, None] = OrderedDict()


def _keep(records: OrderedDict, key: object) -> None:
    records[key] = None
    records.move_to_end(key)
    while len(records) > KEPT:
        records.popitem(last=False)


class TryStopped(Exception):
    """Raised inside the run loop of a try that was told to stop (turned into Airflow's
    ``AirflowTaskTerminated`` at the operator's edge)."""


def key_of(context: object) -> TryKey | None:
    """The try's key from an Airflow context (None when it has no task instance: a bare test)."""
    ti = context.get("ti") if hasattr(context, "get") else None  # type: ignore[attr-defined]
    if ti is None:
        return None
    try:
        index = getattr(ti, "map_index", None)
        return (str(ti.dag_id), str(ti.run_id), str(ti.task_id), -1 if index is None else int(index),
                int(ti.try_number))
    except (AttributeError, TypeError, ValueError):
        return None


def stop(key: TryKey | None) -> None:
    if key is not None:
        with _lock:
            _keep(_stopped, key)


def stopped(key: TryKey | None) -> bool:
    with _lock:
        return key is not None and key in _stopped


def check(key: TryKey | None, doing: str) -> None:
    """Refuse ``doing`` (a create, a plan move) for a try told to stop."""
    if stopped(key):
        raise TryStopped(f"the task was told to stop (killed, marked failed or success, cleared or timed out): "
                         f"not {doing}")


def note_cancel(job_name: str | None) -> None:
    if job_name:
        with _lock:
            _keep(_cancelled, job_name)


def cancelled_here(job_name: str | None) -> bool:
    with _lock:
        return bool(job_name) and job_name in _cancelled


def forget() -> None:
    """Forget every record: for tests, whose emulator hands out the same job names after each reset
    (real Vertex never reuses a job's id, so a name recorded here is never another job's)."""
    with _lock:
        _stopped.clear()
        _cancelled.clear()
