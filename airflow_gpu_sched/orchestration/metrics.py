"""Which metrics a training task sends, under which names and tags: decisions only (no I/O).

Named as Airflow 3.3 names its own (``metrics_template.yaml``): a dotted name without variables,
the variables as tags (``gpu_sched.gpu_hours`` tagged ``dag_id``, ``task_id``, ``strategy``,
``accelerator``, ``region``), and a *legacy* name that embeds them, for StatsD without tags
(``gpu_sched.gpu_hours.<dag_id>.<task_id>.<strategy>``, as ``ti.finish.<dag_id>.<task_id>.<state>``),
sent too while ``[metrics] legacy_names_on`` is true (Airflow's default). A dot inside a value
becomes ``__`` in a legacy name, as Airflow does for a task id in a task group, so the hierarchy
keeps its segments.

The types are chosen so that a dashboard's sum is right:

===========================  =========  ==================================================
metric                       type       value (one per attempt unless said)
===========================  =========  ==================================================
gpu_sched.capacity_wait      timer      createTime -> first RUNNING observed (or end), ms
gpu_sched.preemptions        counter    preemptions observed (a lower bound on SPOT)
gpu_sched.fallbacks          counter    1 per move of the plan to another step or region
gpu_sched.gpu_hours          counter    the attempt's GPU-hours (a float count)
gpu_sched.cost               counter    the attempt's cost in the price table's currency
gpu_sched.failure_resubmits  counter    1 per job resubmitted after a hardware-shaped
                                        failure, tagged ``reason`` (the rule that matched)
===========================  =========  ==================================================

GPU-hours and cost are counters incremented by the attempt's value, not gauges: a StatsD gauge
keeps the last value per flush interval, so two tasks (or two attempts) ending in one interval
would hide each other and a sum over time means nothing; counters are added up by the StatsD
server per interval, so ``sum`` of ``gpu_sched.gpu_hours`` by ``dag_id`` (or of
``gpu_sched.gpu_hours.<dag_id>.*.*``) is the DAG's GPU-hours. StatsD, DogStatsD, statsd_exporter
and OpenTelemetry counters all take a fractional increment.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

PREFIX = "gpu_sched"
# each metric: (type, the tags its legacy name embeds after dag_id and task_id)
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "capacity_wait": ("timer", ("strategy",)),
    "preemptions": ("counter", ("strategy",)),
    "fallbacks": ("counter", ("strategy",)),
    "gpu_hours": ("counter", ("strategy",)),
    "cost": ("counter", ("strategy",)),
    "failure_resubmits": ("counter", ("strategy",)),
}


@dataclass(frozen=True)
class Metric:
    """One metric to send: ``kind`` is the stats call (``timing`` or ``incr``)."""

    kind: Literal["timing", "incr"]
    name: str
    value: float | timedelta
    tags: dict[str, str] = field(default_factory=dict)
    legacy_name: str = ""
    legacy_tags: dict[str, str] = field(default_factory=dict)


def _segment(value: str) -> str:
    # as Airflow's legacy names: "group.task" -> "group__task" keeps the name's segments
    return str(value).replace(".", "__")


def metric(short: str, value: float | timedelta, tags: dict[str, str]) -> Metric:
    """``short`` (a key of :data:`METRICS`) under its modern and legacy names."""
    kind, embedded = METRICS[short]
    in_name = ("dag_id", "task_id", *embedded)
    legacy = ".".join([PREFIX, short, *(_segment(tags.get(k) or "none") for k in in_name)])
    return Metric("timing" if kind == "timer" else "incr", f"{PREFIX}.{short}", value, dict(tags), legacy,
                  {k: v for k, v in tags.items() if k not in in_name})


def _tags(dag_id: str, task_id: str, strategy: str, accelerator: str | None, region: str | None) -> dict[str, str]:
    return {"dag_id": dag_id, "task_id": task_id, "strategy": strategy, "accelerator": accelerator or "none",
            "region": region or "none"}


def attempt_metrics(dag_id: str, task_id: str, record: dict[str, Any], preemptions: int,
                    cost: float | None, currency: str | None = None) -> list[Metric]:
    """What one ended attempt sends (``record``: :func:`accounting.attempt_record` plus its
    ``location``). Zero preemptions and zero GPU-hours send nothing (a counter of 0 adds
    nothing); cost only with a price table."""
    tags = _tags(dag_id, task_id, record["strategy"], record.get("accelerator_type"), record.get("location"))
    found = [metric("capacity_wait", timedelta(seconds=float(record.get("queued_seconds") or 0.0)), tags)]
    if preemptions:
        found.append(metric("preemptions", int(preemptions), tags))
    if record.get("gpu_hours"):
        found.append(metric("gpu_hours", float(record["gpu_hours"]), tags))
    if cost:
        found.append(metric("cost", float(cost), {**tags, "currency": currency or "none"}))
    if record.get("resubmit"):  # its job failed hardware-shaped and a new one was submitted
        found.append(metric("failure_resubmits", 1, {**tags, "reason": str(record["resubmit"])}))
    return found


def fallback_metrics(dag_id: str, task_id: str, info: dict[str, Any]) -> list[Metric]:
    """What a move of the plan sends (``info``: the ``on_fallback`` record): tagged with the
    step and region it left (``strategy``, ``region``) and where it went (``to_strategy``,
    ``to_region``)."""
    tags = {"dag_id": dag_id, "task_id": task_id, "strategy": info["from"], "region": info.get("from_location") or "none",
            "to_strategy": info["to"], "to_region": info.get("to_location") or "none"}
    return [metric("fallbacks", 1, tags)]
