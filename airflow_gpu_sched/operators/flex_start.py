"""FLEX_START (Dynamic Workload Scheduler): the job queues until all its GPUs are free at once.

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators.base import VertexTrainingOperator
from airflow_gpu_sched.orchestration.training_spec import step_duration_arg as _step_duration_arg
from airflow_gpu_sched.vertex.defaults import MAX_WAIT_DURATION

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration.plans import Step


class FlexStartTrainingOperator(VertexTrainingOperator):
    """Train with ``scheduling.strategy=FLEX_START`` (a preset of the plan: its own step first,
    then ``fallback=[...]``).

    :param max_wait_duration: how long the job may wait for its GPUs (timedelta, seconds,
        ``"2h"``, ``"1800s"``); 0 waits forever; default 1 day. When it passes first and no
        fallback is left, the task fails with :class:`CapacityWaitExpired`.
    DWS rules are checked before submitting: GPUs L4, A100, H100, H200 or B200; ``timeout`` at
    most 7 days; every worker pool the same machine configuration. FLEX_START uses the
    *preemptible* GPU quota of the region.
    :param capacity_wait_timeout: an optional bound the operator enforces on the time before the
        job first runs (cancel, then fall back); None (default): ``max_wait_duration`` alone,
        which the service enforces.
    """

    def __init__(self, *, max_wait_duration: timedelta | float | str | None = MAX_WAIT_DURATION,
                 capacity_wait_timeout: timedelta | float | str | None = None, **kwargs: Any) -> None:
        from airflow_gpu_sched.orchestration.plans import is_observed_wait

        self.max_wait_duration = max_wait_duration if is_observed_wait(max_wait_duration) else \
            _step_duration_arg("max_wait_duration", max_wait_duration)  # "observed[:<max>]": learned per region
        self.capacity_wait_timeout = _step_duration_arg("capacity_wait_timeout", capacity_wait_timeout)
        super().__init__(**kwargs)

    def own_steps(self) -> list[Step | dict]:
        from airflow_gpu_sched.orchestration.plans import FlexStartStep, is_observed_wait
        from airflow_gpu_sched.orchestration.templated_args import has_template

        if has_template(self.max_wait_duration) or has_template(self.capacity_wait_timeout) or \
                is_observed_wait(self.max_wait_duration):
            # a step's values are rendered then parsed with the plan (plan_spec)
            return [{"strategy": "FLEX_START", "max_wait_duration": self.max_wait_duration,
                     "capacity_wait_timeout": self.capacity_wait_timeout}]
        return [FlexStartStep(max_wait_duration=self.max_wait_duration,
                              capacity_wait_timeout=self.capacity_wait_timeout)]
