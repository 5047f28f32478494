"""What a training task tells the world as it goes, in one place, for single jobs and race
members alike: an attempt closed (its log line, the ``gpu_sched.*`` metrics, the callbacks, the
observed-region history), a job created (XCom and the console links), the task succeeded (its
summary: the result, with the run budget settled).

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.operators import region_order
from airflow_gpu_sched.operators.links import LINKS_KEY, console_links, wrote
from airflow_gpu_sched.orchestration import signals

CONSOLE_URL_KEY = "console_url"
JOB_NAME_KEY = "job_name"


def attempt_closed(op: Any, record: dict[str, Any], preemptions: int, headline: str) -> None:
    """An attempt of a job ended (``record``: accounting's attempt record with its location)."""
    op.log.info("%s: queued %.0fs, ran %.0fs, %.3f GPU-hours", headline, record["queued_seconds"],
                record["run_seconds"], record["gpu_hours"])
    region_order.record(op, record, preemptions)
    signals.attempt_finished(op, record, preemptions)


def no_job_closed(op: Any, record: dict[str, Any]) -> None:
    """An attempt that never got a job (a quota refusal, a busy pool): the region history only."""
    region_order.record(op, record, 0)


def job_created(context: Any, job_name: str, resource_id: str | None = None) -> None:
    """The task's job is ``job_name``: in XCom, with its console page and links."""
    from airflow_gpu_sched.orchestration.accounting import console_url

    ti = context.get("ti") if context is not None else None
    if ti is None:
        return
    ti.xcom_push(key=JOB_NAME_KEY, value=job_name)
    ti.xcom_push(key=CONSOLE_URL_KEY, value=console_url(job_name))
    ti.xcom_push(key=LINKS_KEY, value=console_links(job_name, resource_id))
    wrote(context.get("task"), LINKS_KEY)  # the extra links may read it at this try's end


def summary(op: Any, ledger: Any, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The task's result (attempts, GPU-hours, cost, outputs), logged as a table."""
    from airflow_gpu_sched.orchestration.accounting import resolve_prices, summary_table, task_result
    from airflow_gpu_sched.orchestration.budget import settle_run_budget

    prices = resolve_prices(op.prices, op.client)  # "catalog": Google's billing catalog, cached
    settle_run_budget(ledger, prices)  # run_budget=: what was spent replaces this task's reservation
    result = task_result(ledger.attempts, ledger.preemptions, op.base_output_dir, prices, outputs)
    op.log.info("training summary:\n%s", summary_table(result))
    return result
