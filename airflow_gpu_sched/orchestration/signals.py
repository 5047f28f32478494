"""What a training task tells the outside world as it goes: Airflow metrics and user callbacks.

Metrics go through Airflow's stats interface (StatsD/OpenTelemetry, as configured), tagged
with strategy and accelerator: ``gpu_sched.capacity_wait_seconds``, ``gpu_sched.run_seconds``,
``gpu_sched.gpu_hours``, ``gpu_sched.preemptions``, ``gpu_sched.fallbacks``.
Callbacks (``on_capacity_acquired``, ``on_preempted``, ``on_fallback``) are callables or Airflow
notifiers, each called once per event with the attempt record (or the fallback record). A
failing callback is logged, never fails the task.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _stats() -> Any:
    try:
        from airflow.sdk._shared.observability.metrics import stats

        return stats
    except ImportError:  # outside Airflow: metrics go nowhere
        return None


def _emit(kind: str, name: str, value: float, tags: dict[str, str]) -> None:
    stats = _stats()
    if stats is None:
        return
    try:
        if kind == "incr":
            stats.incr(f"gpu_sched.{name}", int(value), tags=tags)
        else:
            stats.gauge(f"gpu_sched.{name}", value, tags=tags)
    except Exception:  # noqa: BLE001 (metrics must never fail a task)
        log.debug("metric %s not sent", name, exc_info=True)


def _call(callback: Any, what: str, record: dict[str, Any]) -> None:
    if callback is None:
        return
    try:
        callback(record)
    except Exception:  # noqa: BLE001 (a user's callback must not fail the training task)
        log.exception("%s callback failed", what)


def attempt_finished(operator: Any, record: dict[str, Any], preemptions: int) -> None:
    tags = {"strategy": record["strategy"], "accelerator": record.get("accelerator_type") or "none",
            "task_id": operator.task_id}
    _emit("gauge", "capacity_wait_seconds", record["queued_seconds"], tags)
    _emit("gauge", "run_seconds", record["run_seconds"], tags)
    _emit("gauge", "gpu_hours", record["gpu_hours"], tags)
    if preemptions:
        _emit("incr", "preemptions", preemptions, tags)
    if record.get("start_time"):
        _call(operator.on_capacity_acquired, "on_capacity_acquired", record)
    if preemptions:
        _call(operator.on_preempted, "on_preempted", {**record, "preemptions": preemptions})


def fell_back(operator: Any, info: dict[str, Any]) -> None:
    _emit("incr", "fallbacks", 1, {"strategy": info["from"], "to": info["to"], "task_id": operator.task_id})
    _call(operator.on_fallback, "on_fallback", info)
