"""The emulator's answer to a body Google's JSON front end refuses: a 400 INVALID_ARGUMENT
with a ``google.rpc.BadRequest`` detail, one field violation per error. The checker itself is
:mod:`airflow_gpu_sched.vertex.strict_json` (the operators check a ``job_spec=`` with it too).

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.vertex.strict_json import body_errors

__all__ = ["body_errors", "refusal"]


def refusal(rpc: str, body: Any) -> ApiError | None:
    """The ApiError Google answers ``body`` with, or None if it parses."""
    errors = body_errors(rpc, body)
    if not errors:
        return None
    violations = [{"field": path, "description": text} if path else {"description": text} for path, text in errors]
    return ApiError("INVALID_ARGUMENT", "\n".join(text for _, text in errors),
                    [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": violations}])
