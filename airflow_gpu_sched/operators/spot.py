"""SPOT: cheap, preemptible VMs; the operator resubmits after the service gives up on a job."""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.errors import PreemptionBudgetExhausted
from airflow_gpu_sched.operators.base import VertexTrainingOperator
from airflow_gpu_sched.outcomes import Event


class SpotTrainingOperator(VertexTrainingOperator):
    """Train with ``scheduling.strategy=SPOT`` (A2 and A3 machines only; no TPUs).

    Vertex AI restarts a preempted job up to six times itself. When a job still ends FAILED by
    preemption (STOCKOUT), the operator submits a new job with the same ``base_output_dir``, so
    ``AIP_CHECKPOINT_DIR`` carries the checkpoints over, up to ``max_preemption_retries`` times;
    then the task fails with :class:`PreemptionBudgetExhausted`. A failure of the user's code
    fails the task at once and is never resubmitted. Set ``base_output_dir`` and checkpoint at
    least every few hours, or every resubmission starts from scratch.
    """

    strategy = "SPOT"

    def __init__(self, *, max_preemption_retries: int = 3, **kwargs: Any) -> None:
        if not isinstance(max_preemption_retries, int) or max_preemption_retries < 0:
            from airflow_gpu_sched.errors import InvalidTrainingSpec
            from airflow_gpu_sched.rules import Violation

            raise InvalidTrainingSpec([Violation("max_preemption_retries",
                                                 f"must be an integer >= 0 (got {max_preemption_retries!r})")])
        self.max_preemption_retries = max_preemption_retries
        super().__init__(**kwargs)

    def on_capacity_outcome(self, context, ledger, kind, job):
        if kind is not Event.PREEMPTED:
            return super().on_capacity_outcome(context, ledger, kind, job)
        resubmitted = ledger.count(Event.PREEMPTED.value) - 1  # attempts preempted before this one
        if resubmitted >= self.max_preemption_retries:
            raise PreemptionBudgetExhausted(
                f"SPOT job preempted past the service's restarts {resubmitted + 1} time(s); "
                f"max_preemption_retries={self.max_preemption_retries} spent",
                job.name, job.error.message if job.error else None)
        self.log.warning("%s was preempted past the service's restarts: resubmitting (%d of %d), "
                         "resuming from the checkpoints in %s", job.name, resubmitted + 1,
                         self.max_preemption_retries, self.base_output_dir or "(no base_output_dir!)")
        return self.wait_for_job(context, self.submit(context, ledger))
