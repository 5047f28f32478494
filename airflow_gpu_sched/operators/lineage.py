"""What a finished training task leaves for others: Asset events and OpenLineage facets.

On success every Asset among the task's outlets gets an event whose extra says which job made
it, on what strategy, at how many GPU-hours and what cost (:func:`assets.event_extra`), set
through ``context["outlet_events"][asset].extra`` as Airflow 3 documents. The return value is
kept on the operator for :meth:`get_openlineage_facets_on_complete`, which the OpenLineage
provider's listener calls in the same process after the task ended; the facets are built in
:mod:`lineage_facets`, imported only then (the provider is not a dependency).

May import: orchestration, operators; airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.orchestration.assets import event_extra

RESULT_ATTR = "_gpu_sched_result"  # the task's return value, for the OpenLineage listener


def task_succeeded(operator: Any, context: Any, result: dict[str, Any]) -> None:
    from airflow.sdk import Asset

    setattr(operator, RESULT_ATTR, result)
    outlets = [o for o in (operator.outlets or []) if isinstance(o, Asset)]
    events = context.get("outlet_events")  # Airflow puts it in every task's context
    if not outlets or events is None:
        return
    extra = event_extra(result)
    for asset in outlets:
        events[asset].extra = dict(extra)


def facets_on_complete(operator: Any, task_instance: Any) -> Any:
    from airflow_gpu_sched.operators.lineage_facets import operator_lineage

    result = getattr(operator, RESULT_ATTR, None)
    if result is None and task_instance is not None:  # another instance ran it: read its XCom
        result = task_instance.xcom_pull(task_ids=operator.task_id)
    return operator_lineage(operator, result or {})
