"""What a training task tells the outside world as it goes: Airflow metrics and user callbacks.

Metrics go through Airflow's public stats interface (``airflow.sdk.observability.stats``:
StatsD, DogStatsD or OpenTelemetry, as ``[metrics]`` configures it); which ones, their names,
tags and types are decided in :mod:`metrics`. A legacy (untagged) name is sent as well while
``[metrics] legacy_names_on`` is true, as Airflow does for its own metrics.
Callbacks (``on_capacity_acquired``, ``on_preempted``, ``on_fallback``) are each a callable, an
Airflow notifier (``airflow.sdk.BaseNotifier``, e.g. the SMTP or Slack provider's), or a list of
them, as ``on_success_callback`` takes. A plain callable is handed the attempt record (the
fallback record); a notifier is called, as Airflow calls it, with the task's context, plus
``gpu_sched``: that record and ``event`` (``capacity_acquired``, ``preempted``, ``fallback``),
so its templates can say ``{{ gpu_sched.strategy }}``. A failing callback or metric is logged,
never fails the task.

May import: orchestration; airflow only inside functions.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when a metric is sent, not when a DAG file imports the operators
    from airflow_gpu_sched.orchestration.metrics import Metric

log = logging.getLogger(__name__)


def _stats() -> Any:
    from airflow_gpu_sched import compat

    return compat.resolve("stats", None)  # None: outside Airflow, metrics go nowhere


def _legacy_names_on() -> bool:
    from airflow_gpu_sched import compat

    return compat.conf.getboolean("metrics", "legacy_names_on", fallback=True)


def emit(metrics: list[Metric]) -> None:
    stats = _stats()
    if stats is None:
        return
    try:
        legacy = _legacy_names_on()
        for m in metrics:
            send = stats.timing if m.kind == "timing" else stats.incr
            send(m.name, m.value, tags=m.tags)
            if legacy:
                send(m.legacy_name, m.value, tags=m.legacy_tags)
    except Exception:  # noqa: BLE001 (metrics must never fail a task)
        log.debug("metrics not sent", exc_info=True)


def _callbacks(given: Any) -> list[Any]:
    if given is None:
        return []
    return list(given) if isinstance(given, (list, tuple)) else [given]


def _notifier_context(event: str, record: dict[str, Any]) -> dict[str, Any]:
    from airflow.sdk import get_current_context

    try:
        context = dict(get_current_context())
    except Exception:  # noqa: BLE001 (not inside a running task, e.g. a unit test)
        context = {}
    return {**context, "gpu_sched": {"event": event, **record}}


def _call(given: Any, event: str, record: dict[str, Any]) -> None:
    for callback in _callbacks(given):
        try:
            from airflow.sdk import BaseNotifier

            if isinstance(callback, BaseNotifier):
                # a copy: rendering its templates is in place, and one task can send several events
                copy.copy(callback)(_notifier_context(event, record))
            else:
                callback(record)
        except Exception:  # noqa: BLE001 (a user's callback must not fail the training task)
            log.exception("on_%s callback %r failed", event, callback)


def _cost(operator: Any, record: dict[str, Any]) -> tuple[float | None, str | None]:
    from airflow_gpu_sched.orchestration.accounting import attempt_cost, resolve_prices

    try:
        prices = resolve_prices(operator.prices, getattr(operator, "client", None))
    except Exception:  # noqa: BLE001 (the result names a bad price table; a metric only skips it)
        return None, None
    return attempt_cost(record, prices), (prices or {}).get("currency")


def attempt_finished(operator: Any, record: dict[str, Any], preemptions: int) -> None:
    from airflow_gpu_sched.orchestration.metrics import attempt_metrics

    cost, currency = _cost(operator, record)
    emit(attempt_metrics(operator.dag_id, operator.task_id, record, preemptions, cost, currency))
    if record.get("running_since"):  # seen RUNNING (startTime is set at admission: it tells nothing)
        _call(operator.on_capacity_acquired, "capacity_acquired", record)
    if preemptions:
        _call(operator.on_preempted, "preempted", {**record, "preemptions": preemptions})


def fell_back(operator: Any, info: dict[str, Any]) -> None:
    from airflow_gpu_sched.orchestration.metrics import fallback_metrics

    emit(fallback_metrics(operator.dag_id, operator.task_id, info))
    _call(operator.on_fallback, "fallback", info)
