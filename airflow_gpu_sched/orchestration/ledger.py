"""What a task instance has submitted, kept in Airflow 3.3's ``task_state_store`` across tries.

The store is scoped to (dag, run, task, map index) and survives retries, worker deaths and
clears. The ledger holds one "training run" of the task:

    {"run": <uuid>, "submission_key": <uuid hex>, "job_name": <name or null>,
     "job_try": <the try that submitted that job, or null>,
     "attempts": [<finished attempt records>], "preemptions": n, "completed": false,
     "completed_try": <the try that saw the run succeed, or null>,
     "position": <index into the plan's (step, region) order>, "waiting_since": <when a
     capacity wait began, or null>, "running_bound": <{"by": epoch seconds, "why": text}: when
     the current job must first be RUNNING, or null>,
     "failed": <{"kind", "message", "job_name", "detail", "try"}: the error the last failed try
     raised, or null>,
     "race": <the current position's race, or null: {"try": the try that started it, "winner":
     member index or null, "members": [{"index", "key", "job_name", "running_by", "why",
     "closed"}]}; written here for operators/race.py, read by plan_engine.RaceState>,
     "observed": <{job name: the states its trigger saw}>, "started_at": <when the task first
     started, for a deadline in a manual run>, "region_orders": <region_order="observed": the
     order this run decided>, "run_budget": <run_budget=: this task's reservation>,
     "cancelled": <names of the jobs this task's on_kill cancelled: their CANCELLED is ours>}

Every write of that data is a method here (the plan engine's effects, carried out by
operators/run.py, name them): no other module touches ``data``.

- Before a create, a fresh submission key is saved; it also goes on the job as a label, so a
  try that died between the create and saving the job name finds the job by label.
- After the create, the job name is saved.
- When the task succeeds, ``completed`` is set: a later try of the same task instance (a
  user clearing a task that succeeded) starts a new training run instead of re-attaching.
  Except an Airflow *retry* of the try that saw the success (no clear between): that try died
  or failed after the job succeeded and before Airflow recorded it (a lost worker, an error in
  the summary), so the run stays completed and the retry succeeds from it, training nothing.
- When a try fails, its error is kept (``failed``): the plan's engine tells from it and the
  try numbers whether a later try is a retry (fail again if a retry cannot help) or follows a
  clear (a new training run: :meth:`new_run`).
Without a ``task_state_store`` (Airflow 3.1 and 3.2: ``compat.HAS_TASK_STATE_STORE``), the
ledger lives in the try's own XCom (:class:`XComStore`): Airflow clears a task's XComs when a
try starts, not when it resumes from the triggerer, so the ledger is kept across the deferral
(a race, a wait's bound, the job name all resume), and a worker that dies mid-wait leaves it for
the resumed try. A retry starts with an empty ledger: it finds its earlier try's live job by the
job's labels on Vertex (operators/reattach.py). With no task instance at all (a unit test
calling ``execute`` with a bare context), an in-memory store: no crash recovery.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import uuid
from typing import Any

LEDGER_KEY = "airflow_gpu_sched.ledger"  # stored in users' task state stores: never changes with the module path
RACE_KEY = "race"
ORDERS_KEY = "region_orders"  # operators/region_order.py (its LEDGER_ORDERS)
WAITS_KEY = "learned_waits"  # operators/region_order.py: max_wait_duration="observed", per step and region
PREEMPTIONS_KEY = "observed_preemptions"  # operators/region_order.py: a SPOT step's, under the cost objective
HARDWARE_KEY = "hardware_orders"  # operators/region_order.py: a step's hardware alternatives, ranked (hardware_order.py)
DECISION_KEYS = (ORDERS_KEY, WAITS_KEY, PREEMPTIONS_KEY, HARDWARE_KEY)  # what a training run decides once at its start
RUN_BUDGET_KEY = "run_budget"  # orchestration/budget.py (its LEDGER_RUN_BUDGET)
SUBMISSION_LABEL = "gpu-sched-submission"
MANAGED_LABEL = "managed-by"
MANAGED_VALUE = "airflow-gpu-sched"


class _MemoryStore:
    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def set(self, key: str, value: Any, **_: Any) -> None:
        self._data[key] = value


class XComStore:
    """The try's own XCom as the ledger's store (Airflow 3.1/3.2): kept across the deferral,
    cleared by Airflow when the next try starts (see the module doc)."""

    def __init__(self, ti: Any):
        self._ti = ti

    def _where(self) -> dict[str, Any]:
        ti = self._ti
        return {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                "map_index": ti.map_index if ti.map_index is not None else -1}

    def get(self, key: str, default: Any = None) -> Any:
        from airflow.sdk.execution_time.xcom import XCom  # the configured backend

        value = XCom.get_one(key=key, **self._where())
        return default if value is None else value

    def set(self, key: str, value: Any, **_: Any) -> None:
        from airflow.sdk.execution_time.xcom import XCom

        XCom.set(key, value, **self._where())


def store_of(context: Any) -> tuple[Any, bool]:
    """The ledger's store for this try, and whether it is kept across tries: the
    ``task_state_store`` (3.3), else the try's XCom (3.1/3.2), else None (no task instance)."""
    if not hasattr(context, "get"):
        return None, False
    store = context.get("task_state_store")
    if store is not None:
        return store, True
    from airflow_gpu_sched import compat

    ti = context.get("ti")
    identified = ti is not None and all(isinstance(getattr(ti, f, None), str) for f in ("dag_id", "task_id", "run_id"))
    if identified and not compat.HAS_TASK_STATE_STORE:
        return XComStore(ti), False
    return None, False


def _fresh_run() -> dict[str, Any]:
    return {"run": uuid.uuid4().hex, "submission_key": None, "job_name": None,
            "attempts": [], "preemptions": 0, "completed": False, "position": 0}


class SubmissionLedger:
    def __init__(self, store: Any | None, try_number: int | None = None, first_try: int | None = None,
                 durable: bool | None = None):
        """``try_number``/``first_try``: this try and the first try since the task instance was
        last cleared (operators/events.py ``first_try``); without them a completed run is
        always followed by a new one. ``durable``: the store is kept across tries (default:
        any store is)."""
        self.durable = store is not None if durable is None else durable
        self._store = store if store is not None else _MemoryStore()
        self.data: dict[str, Any] = dict(self._store.get(LEDGER_KEY) or {})
        if not self.data or (self.data.get("completed") and not self._retry_of_completion(try_number, first_try)):
            self.data = _fresh_run()

    def _retry_of_completion(self, try_number: int | None, first_try: int | None) -> bool:
        """This try is an Airflow retry of the try that saw the run succeed (no clear between)."""
        done = self.data.get("completed_try")
        if done is None or try_number is None or first_try is None:
            return False
        return first_try <= int(done) < try_number

    @classmethod
    def from_context(cls, context: Any, first_try: int | None = None) -> SubmissionLedger:
        ti = context.get("ti") if hasattr(context, "get") else None
        store, durable = store_of(context)
        return cls(store, try_number=getattr(ti, "try_number", None), first_try=first_try, durable=durable)

    def adopt(self, submission_key: str, position: int) -> None:
        """A retry without a kept ledger (3.1/3.2) takes on the job an earlier try submitted,
        found by its labels (operators/reattach.py): its key and plan position, the job found
        again by that key as if the earlier try had died before saving its name."""
        self.data.update(submission_key=submission_key, job_name=None, position=position, job_try=None)
        self.save()

    @property
    def completed(self) -> bool:
        """The run succeeded (kept only for a retry of the try that saw it: see the module doc)."""
        return bool(self.data.get("completed"))

    def save(self) -> None:
        self._save_data(self.data)

    @property
    def job_name(self) -> str | None:
        return self.data.get("job_name")

    @property
    def submission_key(self) -> str | None:
        return self.data.get("submission_key")

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return list(self.data.get("attempts", []))

    @property
    def preemptions(self) -> int:
        return int(self.data.get("preemptions", 0))

    @property
    def position(self) -> int:
        """The plan position (index into the (step, region) order) this run is at."""
        return int(self.data.get("position", 0))

    @property
    def race(self) -> dict[str, Any] | None:
        """The current position's race block, or None (written through :meth:`race_block`)."""
        return self.data.get("race")

    def observed(self, job_name: str) -> dict[str, Any] | None:
        """The states a trigger saw of ``job_name`` (kept: the next trigger goes on from them)."""
        return (self.data.get("observed") or {}).get(job_name)

    def started_at(self, now: Any) -> str:
        """When the task first started (ISO text), saved at the first ask and kept across tries."""
        if not self.data.get("started_at"):
            self.data["started_at"] = now.isoformat()
            self.save()
        return self.data["started_at"]

    def new_run(self) -> None:
        """A new training run of the task (it was cleared after a failed try)."""
        self.data = _fresh_run()
        self.save()

    def note_failure(self, kind: str, message: str, job_name: str | None, detail: str | None,
                     try_number: int | None) -> None:
        """The error this try fails with, for the next try to read."""
        self.data["failed"] = {"kind": kind, "message": message, "job_name": job_name, "detail": detail,
                               "try": try_number}
        self.save()

    def new_submission(self) -> str:
        """A fresh key for the next create, saved before the create is sent (an earlier try's
        failure is history from here on)."""
        key = uuid.uuid4().hex
        self.data.update(submission_key=key, job_name=None, running_bound=None, failed=None)
        self.save()
        return key

    @property
    def job_try(self) -> int | None:
        """The try that submitted the current job (None: unknown, e.g. found by its label)."""
        return self.data.get("job_try")

    def record_job(self, job_name: str, try_number: int | None = None) -> None:
        self.data.update(job_name=job_name, job_try=try_number)
        self.save()

    def finish_attempt(self, record: dict[str, Any], preemptions: int = 0, completed: bool = False,
                       try_number: int | None = None) -> None:
        """Close the current attempt (its job ended), in one write: the next create needs a
        new key, and a successful task is marked completed (by ``try_number``) at the same time."""
        self.data["attempts"] = [*self.attempts, record]
        self.data["preemptions"] = self.preemptions + preemptions
        self.data.update(submission_key=None, job_name=None, completed=completed, waiting_since=None,
                         running_bound=None, completed_try=try_number if completed else None)
        self.save()

    def move_to(self, position: int) -> None:
        """The plan moves on: the next create is a new submission at ``position``."""
        self.data.update(position=position, submission_key=None, job_name=None, waiting_since=None,
                         running_bound=None, race=None)
        self.save()

    def set_running_bound(self, by: float | None, why: str | None) -> None:
        """The operator's bound on the current job's time before RUNNING (kept across tries, so
        a re-attached trigger enforces the same instant)."""
        self.data["running_bound"] = {"by": by, "why": why} if by is not None else None
        self.save()

    @property
    def running_bound(self) -> tuple[float | None, str | None]:
        bound = self.data.get("running_bound") or {}
        return bound.get("by"), bound.get("why")

    def note_waiting_since(self, when: Any) -> None:
        if not self.data.get("waiting_since"):
            self.data["waiting_since"] = when.isoformat()
            self.save()

    def snapshot(self) -> dict[str, Any]:
        """A copy of the data, for the plan engine to read (``State.of``)."""
        import copy

        return copy.deepcopy(self.data)

    def note_cancel(self, job_name: str) -> None:
        """A cancel this task sent (on_kill): the job's CANCELLED is ours, never the service's
        verdict (outcomes.cancel_cause). Written onto what the store holds now, not this object's
        copy, which may be older (on_kill runs in a signal handler, on the try's first object)."""
        stored = dict(self._store.get(LEDGER_KEY) or self.data)
        stored["cancelled"] = self.data["cancelled"] = sorted({*stored.get("cancelled", []), job_name})
        self._save_data(stored)

    def _save_data(self, data: dict[str, Any]) -> None:
        from airflow_gpu_sched import compat

        never = compat.resolve("NEVER_EXPIRE", None)  # the task_state_store's retention (3.3)
        if never is not None and self.durable:  # an XCom takes no retention
            self._store.set(LEDGER_KEY, data, retention=never)
        else:
            self._store.set(LEDGER_KEY, data)

    def cancelled_by_us(self, job_name: str | None) -> bool:
        return bool(job_name) and job_name in self.data.get("cancelled", [])

    def keep_observed(self, job_name: str, observed: dict[str, Any]) -> None:
        """The states a trigger saw of ``job_name`` (saved with the next write)."""
        self.data.setdefault("observed", {})[job_name] = observed

    # ------------------------------------------------------------------ a race (operators/race.py)

    def open_jobs(self) -> list[str]:
        """The jobs this run may still have waiting or running: the race's open members, else the
        run's job (none once the run completed)."""
        if self.completed:
            return []
        members = [m["job_name"] for m in (self.race or {}).get("members", []) if m.get("job_name")
                   and not m.get("closed")]
        return members or ([self.job_name] if self.job_name else [])

    def race_member(self, index: int) -> dict[str, Any] | None:
        """The race's member ``index`` (a copy), or None."""
        member = next((m for m in (self.race or {}).get("members", []) if m["index"] == index), None)
        return dict(member) if member is not None else None

    def start_race(self, try_number: int | None) -> None:
        """A new race at the current position, started by ``try_number``."""
        self.data[RACE_KEY] = {"try": try_number, "winner": None, "members": []}
        self.save()

    def update_members(self, updates: dict[int, dict[str, Any]]) -> None:
        """Members' fields (a member not yet in the race is added), in one write."""
        race = self.data.setdefault(RACE_KEY, {"try": None, "winner": None, "members": []})
        for index, fields in updates.items():
            member = next((m for m in race["members"] if m["index"] == index), None)
            if member is None:
                member = {"index": index, "key": None, "job_name": None, "running_by": None, "why": None,
                          "closed": False}
                race["members"].append(member)
            member.update(fields)
        self.save()

    def race_won(self, index: int, job_name: str) -> None:
        """Member ``index`` won: its job (and key, and the try that started the race) is the task's."""
        race = self.data.get(RACE_KEY) or {}
        member = self.race_member(index) or {}
        race["winner"] = index
        self.data.update(job_name=job_name, submission_key=member.get("key"), job_try=race.get("try"),
                         running_bound=None)
        self.save()

    def close_member(self, index: int, record: dict[str, Any]) -> None:
        """A member's attempt and its ``closed`` mark, in one write."""
        member = next((m for m in (self.race or {}).get("members", []) if m["index"] == index), None)
        if member is not None:
            member["closed"] = True
        self.data["attempts"] = [*self.attempts, record]
        self.save()

    # ------------------------------------------------------------------ kept for the run: region order, run budget

    @property
    def run_decisions(self) -> dict[str, dict[str, Any]] | None:
        """What this training run decided at its start (region orders, learned waits, observed
        preemptions: operators/region_order.py), or None: not decided yet."""
        if self.data.get(ORDERS_KEY) is None:
            return None
        return {key: self.data.get(key) or {} for key in DECISION_KEYS}

    def keep_run_decisions(self, decided: dict[str, dict[str, Any]]) -> None:
        self.data.update({key: decided.get(key) or {} for key in DECISION_KEYS})
        self.save()

    @property
    def run_budget(self) -> dict[str, Any] | None:
        """This task's reservation of its DAG run's budget (orchestration/budget.py), or None."""
        return self.data.get(RUN_BUDGET_KEY)

    def hold_run_budget(self, held: dict[str, Any]) -> None:
        if RUN_BUDGET_KEY not in self.data:
            self.data[RUN_BUDGET_KEY] = held
            self.save()

    def count(self, outcome: str, position: int) -> int:
        """Finished attempts at one plan position that ended with ``outcome``."""
        return sum(1 for a in self.attempts if a.get("position") == position and a.get("outcome") == outcome)
