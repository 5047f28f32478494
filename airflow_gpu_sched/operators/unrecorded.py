"""A job created but not recorded: the ledger write right after a create failed.

Nothing would know the job then: no later try finds its name (a retry may still find it by its
submission-key label, but a task with ``retries=0`` has no later try), nobody watches it, and it
holds GPUs until its timeout. So the job is cancelled at once, and the task fails saying so; if
the cancel fails too, the error names the job to cancel by hand.

May import: vertex, orchestration, hooks, triggers, operators; airflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_gpu_sched.orchestration.errors import GpuTrainingError


class JobNotRecorded(GpuTrainingError):
    """The job was created but the task's ledger could not record it; it was cancelled (or
    the message says to cancel it by hand)."""


def record_or_cancel(log: Any, record: Callable[[], None], cancel: Callable[[], Any], job_name: str) -> None:
    """``record()`` the created job; if that raises, ``cancel()`` it and fail naming both."""
    try:
        record()
    except Exception as exc:  # noqa: BLE001 - whatever the store raises, the job must not run unwatched
        why = f"{type(exc).__name__}: {exc}"
        log.error("created %s but could not record it in the task's ledger (%s): cancelling it, "
                  "so it does not run unwatched", job_name, why)
        try:
            cancel()
        except Exception as cancel_exc:  # noqa: BLE001
            raise JobNotRecorded(f"{job_name} was created but could not be recorded in the task's ledger ({why}), "
                                 f"and cancelling it failed ({type(cancel_exc).__name__}: {cancel_exc}): cancel "
                                 f"it by hand", job_name) from exc
        raise JobNotRecorded(f"{job_name} was created but could not be recorded in the task's ledger ({why}); "
                             f"it was cancelled so that it does not run unwatched", job_name) from exc
