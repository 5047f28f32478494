"""A REST call as data (:class:`ApiCall`), and whether it may be sent twice (:class:`Safety`).

May import: vertex; never airflow.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping


# --------------------------------------------------------------------------- calls


class Safety(enum.Enum):
    """May the call be sent twice? Decides what the retry classifier allows."""

    IDEMPOTENT = "idempotent"  # get/list/cancel/delete, and creates that carry a client-chosen id
    CREATE = "create"  # customJobs.create: the server picks the id, a repeat makes a second job


@dataclass(frozen=True)
class ApiCall:
    rpc: str
    method: str
    path: str
    location: str
    params: Mapping[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    safety: Safety = Safety.IDEMPOTENT
    service: str = "aiplatform"  # "cloudquotas": sent to the Cloud Quotas API's root (quotas_root)
