"""SPOT: cheap, preemptible VMs; the operator resubmits after the service gives up on a job.

May import: orchestration, operators; airflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators.base import VertexTrainingOperator
from airflow_gpu_sched.orchestration.training_spec import step_duration_arg as _step_duration_arg

if TYPE_CHECKING:
    from airflow_gpu_sched.orchestration.plans import Step


class SpotTrainingOperator(VertexTrainingOperator):
    """Train with ``scheduling.strategy=SPOT`` (A2 and A3 machines, ``catalog.SPOT_MACHINE_SERIES``; no TPUs).

    Vertex AI restarts a preempted job up to six times itself. When a job still ends FAILED by
    preemption (STOCKOUT), the operator submits a new job with the same ``base_output_dir``, so
    ``AIP_CHECKPOINT_DIR`` carries the checkpoints over, up to ``max_preemption_retries`` times;
    then the plan falls back (``fallback=[...]``) or the task fails with
    :class:`PreemptionBudgetExhausted`. A failure of the user's code fails the task at once and
    is never resubmitted. Set ``base_output_dir`` and checkpoint at least every few hours, or
    every resubmission starts from scratch.

    :param capacity_wait_timeout: how long a job may wait (QUEUED, PENDING) before it first
        runs; past it the operator cancels it and falls back, or fails with
        :class:`CapacityWaitExpired`. None (default): a SPOT job with no Spot capacity waits for ever.
    """

    def __init__(self, *, max_preemption_retries: int = 3,
                 capacity_wait_timeout: timedelta | float | str | None = None, **kwargs: Any) -> None:
        self.max_preemption_retries = max_preemption_retries
        self.capacity_wait_timeout = _step_duration_arg("capacity_wait_timeout", capacity_wait_timeout)
        super().__init__(**kwargs)

    def own_steps(self) -> list[Step | dict]:
        return [{"strategy": "SPOT", "max_preemption_retries": self.max_preemption_retries,
                 "capacity_wait_timeout": self.capacity_wait_timeout}]
