"""The failed try as the UI plugin reads it (pure): the attempts so far, in the task result's
shape (:func:`accounting.task_result`), and a ``failure`` block: the error's kind, message, job,
what Vertex AI said, the failing replica's last log lines and the console links.

A failed task has no return value, and the night that went wrong is the one people open the
plugin for; so the operator pushes this record (XCom :data:`FAILURE_KEY`) just before it raises
(:mod:`airflow_gpu_sched.operators.failed_try`). Nothing of the job's spec is in it; texts that
come from the job (its error, its log lines) have every value of the job's ``env`` cut out
(:func:`scrub`, the rule of :mod:`.redaction`), as the secrets masker cuts what it knows.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

from typing import Any, Iterable

from airflow_gpu_sched.orchestration.accounting import console_url, task_result
from airflow_gpu_sched.orchestration.redaction import MIN_SECRET, env_values, redact

__all__ = ["FAILURE_KEY", "FAILURE_KEYS", "MAX_TEXT", "MIN_SECRET", "env_values", "failure_record", "scrub"]

FAILURE_KEY = "training_failure"  # the XCom key the UI plugin reads for a task that did not succeed
FAILURE_KEYS = ("kind", "message", "job_name", "detail", "log_tail", "try_number", "console_url", "links")
MAX_TEXT = 8000  # characters of each text kept (a log tail is a few lines; XCom is not a log store)


def scrub(text: str | None, secrets: Iterable[str], min_length: int = MIN_SECRET) -> str | None:
    """``text`` with every secret cut out by the one rule (:mod:`.redaction`: its forms, Airflow's
    minimum length), capped at :data:`MAX_TEXT`."""
    text = redact(text, secrets, min_length)
    if text is None:
        return None
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " [cut]"


def failure_record(attempts: list[dict[str, Any]], preemptions: int, base_output_dir: str | None,
                   prices: dict[str, Any] | None, failure: Any, try_number: int | None,
                   links: dict[str, str] | None, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The record: the task result of the attempts so far (none: no job was ever made, e.g. a
    deadline passed before the first create) plus ``failure`` (:data:`FAILURE_KEYS`).
    ``failure`` is a :class:`plan_engine.Failure` (kind, message, job_name, detail, log_tail)."""
    secrets = list(secrets)
    if attempts:
        result = task_result(attempts, preemptions, base_output_dir, prices)
        for a in result["attempts"]:
            a["error"] = scrub(a.get("error"), secrets)
    else:
        result = {"job_name": None, "state": None, "strategy": None, "attempts": [], "preemptions": preemptions,
                  "queued_seconds": 0.0, "run_seconds": 0.0, "gpu_hours": 0.0, "cost": None,
                  "currency": prices.get("currency") if prices else None, "console_url": None,
                  "base_output_dir": base_output_dir}
    job_name = failure.job_name or result["job_name"]
    result["failure"] = {
        "kind": str(failure.kind), "message": scrub(failure.message, secrets), "job_name": job_name,
        "detail": scrub(failure.detail, secrets), "log_tail": scrub(failure.log_tail, secrets),
        "try_number": try_number, "console_url": console_url(job_name) if job_name else None,
        "links": dict(links or {}),
    }
    return result
