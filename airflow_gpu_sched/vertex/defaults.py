"""Defaults the operators' signatures show, in a module that costs nothing to import (a DAG file
imports the operators; the pydantic models and the rules are loaded only when a task runs).

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from datetime import timedelta

# Scheduling.maxWaitDuration when a FLEX_START job leaves it unset (vertex.models.Scheduling)
MAX_WAIT_DURATION = timedelta(days=1)
# seconds of failing API calls (5xx, 429, network) tolerated before "Vertex unreachable"
TRANSIENT_ERROR_WINDOW = 600.0
