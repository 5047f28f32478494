"""Push the failed try's record (:mod:`airflow_gpu_sched.orchestration.failure_record`) to XCom,
just before the operator raises: the UI plugin shows a failed (or up-for-retry) task from it.

Best effort: a record that cannot be made or pushed is a warning in the task log, never an
error that would replace the training error the task fails with.

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_gpu_sched.orchestration.failure_record import FAILURE_KEY, env_values, failure_record

log = logging.getLogger(__name__)


def push(operator: Any, context: Any, ledger: Any, failure: Any) -> None:
    """The attempts in ``ledger`` and ``failure`` (a ``plan_engine.Failure``) as XCom ``training_failure``."""
    ti = context.get("ti")
    if ti is None:
        return
    try:
        from airflow_gpu_sched.operators.links import console_links
        from airflow_gpu_sched.orchestration.accounting import resolve_prices

        attempts = ledger.attempts
        job_name = failure.job_name or (attempts[-1].get("job_name") if attempts else None)
        links = console_links(job_name) if job_name else None
        record = failure_record(attempts, ledger.preemptions, operator.base_output_dir,
                                _prices(resolve_prices, operator.prices), failure, getattr(ti, "try_number", None),
                                links, _secrets(operator, context))
        ti.xcom_push(key=FAILURE_KEY, value=_redact(record))
    except Exception as exc:  # noqa: BLE001 - the task's own error must stay the one it fails with
        log.warning("the failed try's record for the UI was not written: %s: %s", type(exc).__name__, exc)


def _prices(resolve: Any, prices: Any) -> Any:
    try:
        return resolve(prices)
    except Exception:  # noqa: BLE001 - a missing price Variable costs the record its costs, not itself
        return None


def _secrets(operator: Any, context: Any) -> set[str]:
    """Every env value of the job as it was submitted (rendered, every pool)."""
    try:
        return env_values(operator.validated_job(context).to_api())
    except Exception:  # noqa: BLE001 - no job could be built: the operator's own env argument then
        env = getattr(operator, "env", None)
        return {str(v) for v in env.values()} if isinstance(env, dict) else set()


def _redact(record: dict[str, Any]) -> dict[str, Any]:
    """What Airflow's secrets masker knows (connections' passwords, sensitive Variables) cut too."""
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:
        return record
    return redact(record)
