"""The errors the emulator answers with, in Google's error body shape (page tokens: ``paging.py``).

Apart from the backend so that its resources (``resources/``) and the HTTP layer
raise them without importing the backend.

May import: vertex; never airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.vertex.models import RPC_STATUS, Status
from airflow_gpu_sched.vertex.rules import Violation


class ApiError(Exception):
    """An error the emulator answers with, in Google's error body shape."""

    def __init__(self, status: str, message: str, details: list[dict] | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details or []
        self.retry_after = retry_after

    @property
    def http_status(self) -> int:
        return RPC_STATUS[self.status][1]

    def body(self) -> dict:
        error: dict[str, Any] = {"code": self.http_status, "message": self.message, "status": self.status}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def violations_error(violations: list[Violation], status: str = "INVALID_ARGUMENT") -> ApiError:
    # Google's wording: "List of found errors:\t1.Field: ...; Message: ...\t"
    listed = "".join(f"{i}.Field: {v.path}; Message: {v.rule}\t" for i, v in enumerate(violations, 1))
    details = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": v.path, "description": v.rule} for v in violations]}]
    return ApiError(status, f"List of found errors:\t{listed}", details)



def cancel_failure() -> Status:
    """The error of a job that failed while it was being cancelled (scenario ``cancelOutcome:
    failed``): its container exited on the SIGTERM the cancel sent (code 3, as a user-code exit)."""
    return Status(code=RPC_STATUS["INVALID_ARGUMENT"][0],
                  message="The replica workerpool0-0 exited with a non-zero status of 143 (SIGTERM) while the job "
                          "was being cancelled. To find out more about why your job exited please check the logs.")
