"""Read the custom job that holds a tuning job's or a pipeline's GPUs, for "got capacity".

A training pipeline says RUNNING minutes before its backing custom job has GPUs (observed:
docs/fidelity.md), and a tuning job may say RUNNING once its first trial is created: while the
owner says RUNNING and no poll saw it get capacity yet, the watchers read that job
(:meth:`JobType.capacity_job`) and look at the owner through it (:meth:`JobType.view`). One GET
per poll while it waits; none once it ran, none for a custom job.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow_gpu_sched.orchestration.job_types import JobType


async def read(job_type: JobType, item: Any, times: dict[str, Any] | None,
               client_factory: Callable[[], Awaitable[Any]]) -> tuple[Any, Any] | Exception:
    """``(item, capacity job)``: the resource (re-read when its list page left out what names the job)
    and the custom job holding its GPUs as read now (None: no read needed, or it is gone); or
    the error of a failed read (a failed poll: the transient-error window applies)."""
    from airflow_gpu_sched.vertex.client import NotFoundError, VertexError

    if not job_type.needs_capacity_read(item, times):
        return item, None
    try:
        client = await client_factory()
        name = None if job_type.listed_without_details(item) else job_type.capacity_job(item, times)
        if name is None:  # a list page (its readMask) left out the trials / the backing job: GET it whole
            item = await job_type.get(client, item.name)
            name = job_type.capacity_job(item, times)
        if name is None:
            return item, None
        try:
            return item, await client.get_custom_job(name)
        except NotFoundError:  # deleted under it: the owner's own state is all there is
            return item, None
    except VertexError as exc:
        return exc
