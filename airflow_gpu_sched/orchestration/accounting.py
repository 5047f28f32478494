"""Wait, run and GPU-hour figures per attempt and per task, from the jobs' own timestamps.

What each figure is, given what the API can tell (no figure claims more):
- running_since: the first RUNNING as *observed* (:mod:`state_times`), never ``startTime``
  (real Vertex sets that at admission, while the job still waits): the first poll that saw
  RUNNING, bounded by the poll before it (exact only from Vertex's own log entries); the
  attempt's ``times`` says which: ``{"running_since", "exact", "bound_seconds", "source"}``;
- queued_seconds: createTime -> running_since, or -> endTime for a job that never ran (-> its
  last updateTime if it has no endTime, as an EXPIRED job); it includes VM provisioning
  (PENDING), which the API does not time apart; off by at most ``times.bound_seconds``;
- run_seconds: running_since -> endTime; for a SPOT job this includes the gaps of the service's
  own restarts, which the API does not show apart; off by at most ``times.bound_seconds``;
- gpu_hours: accelerators per replica x replicas x run_seconds, summed over the job's pools: an
  estimate of GPU time held from the timestamps, not Google's bill (it counts SPOT restart gaps,
  which Google does not bill, and not the provisioning before RUNNING); a job never seen to run
  holds none;
- cost: gpu_hours x the user's price table: an estimate, never an invoice;
- preemptions: the preemptions the poller *observed*: each final STOCKOUT (exact) plus the
  service's restarts it saw as RUNNING -> QUEUED/PENDING between two polls. A restart between
  polls, or one the service does not show at all, is not counted: with any SPOT attempt the
  figure is a lower bound (``preemptions_lower_bound``: true).

May import: vertex, orchestration; airflow only inside functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_gpu_sched.orchestration import state_times
from airflow_gpu_sched.orchestration.job_types import job_type_of
from airflow_gpu_sched.vertex.models import CustomJob, CustomJobSpec
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp

RESULT_KEYS = ("job_name", "state", "strategy", "attempts", "preemptions", "preemptions_lower_bound",
               "queued_seconds",
               "run_seconds", "gpu_hours", "cost", "currency", "console_url", "base_output_dir",
               "times", "hardware")
ATTEMPT_KEYS = ("job_name", "strategy", "location", "state", "create_time", "start_time", "end_time",
                "queued_seconds", "run_seconds", "gpu_hours", "cost", "error",
                # for the timeline (drawing/timeline.py): how the attempt ended, restarts seen, on what
                "outcome", "restarts_observed", "accelerator_type",
                # the hardware it got (orchestration/hardware.py: the alternative a plan step tried)
                "hardware",
                # when it got capacity as observed, and whether that is exact or bounded by a poll
                "running_since", "times")


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, round((end - start).total_seconds(), 3))


def attempt_record(job: CustomJob, strategy: str, outcome: str, observed_restarts: int = 0,
                   gpu_hours: float | None = None, observed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One attempt, JSON-safe, as the submission ledger keeps it (XCom shows ATTEMPT_KEYS).
    ``job`` is a custom job or another job type's CustomJob view (:mod:`job_types`), whose
    ``gpu_hours`` it gives when the run time x GPUs of the job does not tell them; ``observed``:
    the states its trigger saw (:mod:`state_times`; None: not watched)."""
    # A job that never ran and has no endTime (EXPIRED: the proto sets endTime only for
    # SUCCEEDED/FAILED/CANCELLED) waited until its last update.
    ended = job.end_time or (job.update_time if job.state and job.state.is_terminal() else None)
    times = state_times.times_summary(job, observed, outcome)
    running = state_times.parse_timestamp(times["running_since"]) if times["running_since"] else None
    queued_until = running or ended
    run = _seconds(running, job.end_time)
    if gpu_hours is None:
        gpu_hours = round(job.job_spec.accelerators_held() * run / 3600.0, 4)
    return {
        "job_name": job.name,
        "strategy": strategy,
        "state": job.state.value if job.state else None,
        "create_time": format_timestamp(job.create_time) if job.create_time else None,
        "start_time": format_timestamp(job.start_time) if job.start_time else None,
        "end_time": format_timestamp(job.end_time) if job.end_time else None,
        "queued_seconds": _seconds(job.create_time, queued_until),
        "run_seconds": run,
        "gpu_hours": gpu_hours,
        "restarts_observed": observed_restarts,
        "outcome": outcome,
        "accelerator_type": _accelerator(job),
        "hardware": hardware_of(job),
        "error": job.error.message if job.error and job.error.message else None,
        "running_since": times["running_since"],
        "times": times,
    }


def no_job_record(strategy: str, state: str, waited_seconds: float, error: str | None,
                  **extra: Any) -> dict[str, Any]:
    """An attempt that never got a job (a busy or failed persistent pool, a quota refusal)."""
    return {"job_name": None, "strategy": strategy, "state": state, "create_time": None, "start_time": None,
            "end_time": None, "running_since": None,
            "times": {"running_since": None, "exact": True, "bound_seconds": 0.0, "source": "never_ran"}, "queued_seconds": round(waited_seconds, 3), "run_seconds": 0.0, "gpu_hours": 0.0,
            "restarts_observed": 0, "outcome": "capacity_timeout", "accelerator_type": None, "hardware": None,
            "error": error, **extra}


def _accelerator(job: CustomJob) -> str | None:
    for _, pool in job.job_spec.active_pools():
        if pool.machine_spec and pool.machine_spec.accelerator_type:
            return pool.machine_spec.accelerator_type.value
    return None


def hardware_of(job: CustomJob) -> dict[str, Any] | None:
    """What the job ran on: its first active pool's machine and GPUs, and its machines in all."""
    pools = job.job_spec.active_pools()
    machine = pools[0][1].machine_spec if pools else None
    if machine is None:
        return None
    accelerator = machine.accelerator_type.value if machine.accelerator_type else None
    return {"machine_type": machine.machine_type, "accelerator_type": accelerator,
            "accelerator_count": machine.accelerator_count, "replica_count": sum(p.replicas for _, p in pools)}


def console_url(job_name: str) -> str:
    """The Google Cloud console page of a custom job, tuning job or training pipeline."""
    return job_type_of(job_name).console_url(job_name)


def resolve_prices(prices: dict[str, Any] | str | None, client: Any = None) -> dict[str, Any] | None:
    """A price table, or the name of an Airflow Variable holding one as JSON, or ``"catalog"``
    (``"catalog:<Variable>"``, a table with ``"source": "catalog"``): Google's billing catalog
    through ``client()`` (the operator's client factory), the table for what it lacks
    (:mod:`catalog_prices`).

    ``{"currency": "USD", "NVIDIA_H100_80GB": {"FLEX_START": 4.0, "SPOT": 2.5, "STANDARD": 9.0,
    "PERSISTENT_RESOURCE": 0.0}}``: per GPU-hour, per accelerator and strategy. There are no
    built-in prices: Google's change by region and over time; configure your own or use the catalog.
    """
    from airflow_gpu_sched.orchestration.catalog_prices import catalog_spec, catalog_table

    from_catalog, table = catalog_spec(prices)
    if isinstance(table, str):
        from airflow.sdk import Variable

        table = Variable.get(table, deserialize_json=True)
    if not from_catalog:
        return table
    if client is None:  # nothing to ask the catalog with (e.g. a metric outside a task)
        return {k: v for k, v in table.items() if k != "source"} if table else None
    return catalog_table(client(), table)


def attempt_cost(attempt: dict[str, Any], prices: dict[str, Any] | None) -> float | None:
    from airflow_gpu_sched.orchestration.catalog_prices import price_of

    if not prices or not attempt.get("gpu_hours"):
        return 0.0 if prices else None
    price = price_of(prices, attempt.get("accelerator_type"), attempt["strategy"], attempt.get("location"))
    return None if price is None else round(attempt["gpu_hours"] * float(price), 4)


def task_result(attempts: list[dict[str, Any]], preemptions: int, base_output_dir: str | None,
                prices: dict[str, Any] | None = None, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The task's return value (XCom): exactly :data:`RESULT_KEYS`, then the job type's own
    ``outputs`` (trials, model; see :mod:`job_types`); each attempt :data:`ATTEMPT_KEYS`."""
    shown = [{**{k: a.get(k) for k in ATTEMPT_KEYS}, "cost": attempt_cost(a, prices),
              **({"race": a["race"]} if a.get("race") else {}),
              **({"resubmit": a["resubmit"]} if a.get("resubmit") else {})} for a in attempts]
    costs = [a["cost"] for a in shown if a["cost"] is not None]
    last = attempts[-1]
    return {
        "job_name": last["job_name"],
        "state": last["state"],
        "strategy": last["strategy"],
        "attempts": shown,
        "preemptions": preemptions,  # observed; see preemptions_lower_bound
        "preemptions_lower_bound": preemptions_may_be_undercounted(attempts),
        "queued_seconds": round(sum(a["queued_seconds"] for a in attempts), 3),
        "run_seconds": round(sum(a["run_seconds"] for a in attempts), 3),
        "gpu_hours": round(sum(a["gpu_hours"] for a in attempts), 4),
        "cost": round(sum(costs), 4) if prices else None,
        "currency": prices.get("currency") if prices else None,
        "console_url": console_url(last["job_name"]) if last["job_name"] else None,  # a failed try's last may have no job
        "base_output_dir": base_output_dir,
        "times": totals_times(attempts),
        "hardware": last.get("hardware"),  # what the last attempt ran on (each attempt's: its own)
        **(outputs or {}),
        **hedging(shown, prices),
    }


def totals_times(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the queued/run/GPU-hour totals are exact: ``exact`` only when every attempt's
    first RUNNING is (from Vertex's log entries); else ``bound_seconds``, the most the queued and
    run totals may each be off by (the sum of the attempts' poll bounds)."""
    shown = [a.get("times") or {} for a in attempts if a.get("job_name")]
    exact = all(t.get("exact", False) for t in shown)
    return {"exact": exact, "bound_seconds": round(sum(float(t.get("bound_seconds") or 0.0) for t in shown), 3),
            "from": "observed states (first poll that saw RUNNING; Vertex's log entries when read), never startTime"}


def hedging(shown: list[dict[str, Any]], prices: dict[str, Any] | None) -> dict[str, Any]:
    """The price of hedging, when the task ran a race: the members that did not win (``lost``:
    cancelled once another reached RUNNING; ``no_winner``: a race that moved the plan on), with
    what they held. Queued FLEX_START and SPOT jobs are not billed; a loser that started before
    its cancel landed is (its GPU-hours and cost are estimates, as every attempt's). Included in
    the totals above; ``{}`` without a race."""
    others = [a for a in shown if a.get("race") in ("lost", "no_winner")]
    if not others:
        return {}
    costs = [a["cost"] for a in others if a["cost"] is not None]
    return {"hedging": {
        "cancelled": sum(1 for a in others if a["race"] == "lost"),
        "members_without_capacity": sum(1 for a in others if a["race"] == "no_winner"),
        "queued_seconds": round(sum(a["queued_seconds"] for a in others), 3),
        "run_seconds": round(sum(a["run_seconds"] for a in others), 3),
        "gpu_hours": round(sum(a["gpu_hours"] or 0 for a in others), 4),
        "cost": round(sum(costs), 4) if prices else None,
    }}


def preemptions_may_be_undercounted(attempts: list[dict[str, Any]]) -> bool:
    """True when an attempt ran on SPOT: the service's own restarts may have gone unseen."""
    return any(a.get("strategy") == "SPOT" and a.get("job_name") for a in attempts)


_RACE_MARK = {"won": " (won race)", "lost": " (lost race)", "no_winner": " (race)"}


def summary_table(result: dict[str, Any]) -> str:
    """The attempts and totals as a fixed-width table, for the task log."""
    rows = [("#", "strategy", "region", "state", "queued s", "run s", "GPU-h", "cost")]
    for number, a in enumerate(result["attempts"], 1):
        state = (a["state"] or "").removeprefix("JOB_STATE_") + _RACE_MARK.get(a.get("race") or "", "")
        rows.append((str(number), a["strategy"], a.get("location") or "", state,
                     f"{a['queued_seconds']:.0f}", f"{a['run_seconds']:.0f}", f"{a['gpu_hours'] or 0:.3f}",
                     "" if a["cost"] is None else f"{a['cost']:.2f}"))
    rows.append(("", "total", "", "", f"{result['queued_seconds']:.0f}", f"{result['run_seconds']:.0f}",
                 f"{result['gpu_hours']:.3f}",
                 "" if result["cost"] is None else f"{result['cost']:.2f} {result['currency'] or ''}".strip()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
    if result.get("hedging"):
        h = result["hedging"]
        cost = "" if h["cost"] is None else f", {h['cost']:.2f} {result['currency'] or ''}".rstrip()
        table += (f"\nhedging: {h['cancelled']} race member(s) cancelled, {h['members_without_capacity']} without "
                  f"capacity; they queued {h['queued_seconds']:.0f}s, ran {h['run_seconds']:.0f}s, "
                  f"{h['gpu_hours']:.3f} GPU-hours{cost} (estimates, in the totals)")
    if result.get("preemptions_lower_bound"):
        table += (f"\npreemptions observed: {result['preemptions']} (a lower bound: the service's restarts "
                  "between polls, or not shown by the API, are not counted)")
    return table
