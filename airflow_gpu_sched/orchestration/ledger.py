"""What a task instance has submitted, kept in Airflow 3.3's ``task_state_store`` across tries.

The store is scoped to (dag, run, task, map index) and survives retries, worker deaths and
clears. The ledger holds one "training run" of the task:

    {"run": <uuid>, "submission_key": <uuid hex>, "job_name": <name or null>,
     "job_try": <the try that submitted that job, or null>,
     "attempts": [<finished attempt records>], "preemptions": n, "completed": false,
     "position": <index into the plan's (step, region) order>, "waiting_since": <when a
     capacity wait began, or null>, "running_bound": <{"by": epoch seconds, "why": text}: when
     the current job must first be RUNNING, or null>,
     "failed": <{"kind", "message", "job_name", "detail", "try"}: the error the last failed try
     raised, or null>,
     "race": <the current position's race, or null: {"try": the try that started it, "winner":
     member index or null, "members": [{"index", "key", "job_name", "running_by", "why",
     "closed"}]}; written by operators/race.py, read by plan_engine.RaceState>}

- Before a create, a fresh submission key is saved; it also goes on the job as a label, so a
  try that died between the create and saving the job name finds the job by label.
- After the create, the job name is saved.
- When the task succeeds, ``completed`` is set: a later try of the same task instance (a
  user clearing a task that succeeded) starts a new training run instead of re-attaching.
- When a try fails, its error is kept (``failed``): the plan's engine tells from it and the
  try numbers whether a later try is a retry (fail again if a retry cannot help) or follows a
  clear (a new training run: :meth:`new_run`).
Without a ``task_state_store`` (older Airflow), an in-memory one is used: no crash recovery.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import uuid
from typing import Any

LEDGER_KEY = "airflow_gpu_sched.ledger"  # stored in users' task state stores: never changes with the module path
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


def _fresh_run() -> dict[str, Any]:
    return {"run": uuid.uuid4().hex, "submission_key": None, "job_name": None,
            "attempts": [], "preemptions": 0, "completed": False, "position": 0}


class SubmissionLedger:
    def __init__(self, store: Any | None):
        self.durable = store is not None
        self._store = store if store is not None else _MemoryStore()
        self.data: dict[str, Any] = dict(self._store.get(LEDGER_KEY) or {})
        if not self.data or self.data.get("completed"):
            self.data = _fresh_run()

    @classmethod
    def from_context(cls, context: Any) -> SubmissionLedger:
        return cls(context.get("task_state_store") if hasattr(context, "get") else None)

    def save(self) -> None:
        try:
            from airflow.sdk.execution_time.context import NEVER_EXPIRE

            self._store.set(LEDGER_KEY, self.data, retention=NEVER_EXPIRE)
        except ImportError:
            self._store.set(LEDGER_KEY, self.data)

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

    def finish_attempt(self, record: dict[str, Any], preemptions: int = 0, completed: bool = False) -> None:
        """Close the current attempt (its job ended), in one write: the next create needs a
        new key, and a successful task is marked completed at the same time."""
        self.data["attempts"] = [*self.attempts, record]
        self.data["preemptions"] = self.preemptions + preemptions
        self.data.update(submission_key=None, job_name=None, completed=completed, waiting_since=None,
                         running_bound=None)
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

    def count(self, outcome: str, position: int) -> int:
        """Finished attempts at one plan position that ended with ``outcome``."""
        return sum(1 for a in self.attempts if a.get("position") == position and a.get("outcome") == outcome)
