"""Errors a training task fails with: typed, so a DAG (or a human) can tell why.

```
AirflowException
├── GpuTrainingError                  the training job did not succeed
│   ├── TrainingJobFailed                 the job FAILED for a reason that is not capacity (user code, timeout);
│   │   │                                 raised as such (Airflow retries: a new job) only with
│   │   │                                 retry_on_user_code_failure=True
│   │   └── TrainingJobFailedNoRetry (+ AFE)   the default: the failed run is not repeated
│   │       └── TrainingJobTimedOut (+ AFE)     the service ended it at scheduling.timeout (FAILED or CANCELLED)
│   ├── TrainingJobCancelled (+ AFE)      someone cancelled the job outside this task
│   ├── CapacityWaitExpired               a capacity wait ran out: FLEX_START's maxWaitDuration, or a step's
│   │                                     capacity_wait_timeout / the deadline before the job first ran
│   ├── PreemptionBudgetExhausted         SPOT: preempted past the service's restarts, max_preemption_retries times
│   ├── PersistentResourceUnavailable     the persistent resource is in ERROR or STOPPING
│   ├── PersistentCapacityTimeout         the pool stayed busy past capacity_wait_timeout
│   ├── CapacityUnavailable               another capacity outcome (e.g. a STANDARD stockout)
│   ├── QuotaTooLow                       the region's GPU quota for the tier is below what the job needs: found by
│   │                                     the preflight, or by Vertex AI (a 429 at create, a pipeline FAILED code 8)
│   ├── DeadlineExceeded (+ AFE)          no step of the plan can finish before the plan's deadline
│   ├── BudgetExceeded (+ AFE)            no step of the plan fits its price cap or what is left of the budget;
│   │                                     raised before any GPU is asked for (orchestration/budget.py)
│   └── VertexUnreachable                 the API kept failing (5xx, 429, network) past the transient-error window
└── AirflowFailException (no Airflow retry: retrying cannot help)
    └── InvalidTrainingSpec               the spec breaks a rule; raised before any GPU is requested
```
``(+ AFE)``: also a subclass of ``AirflowFailException``, Airflow's no-retry exception, so Airflow fails
the task at once whatever its ``retries`` (a retry cannot change the outcome), while ``except
TrainingJobCancelled`` still catches it. Which outcome an Airflow retry acts on, and how: the
retry table in ``docs/operators.md``.
Every message carries the job name and the service's ``error.message`` where there is one; a
``TrainingJobFailed``'s also the failing replica's last log lines (``failure_log_lines``).
With a capacity plan, the capacity errors are raised only when the plan has no step left.

May import: orchestration; airflow.
"""

from __future__ import annotations

from airflow_gpu_sched import compat

AirflowException, AirflowFailException = compat.AirflowException, compat.AirflowFailException


class GpuTrainingError(AirflowException):
    def __init__(self, message: str, job_name: str | None = None, job_error: str | None = None,
                 log_tail: str | None = None):
        from airflow_gpu_sched.orchestration.plan_engine import failure_text  # when raised: not at DAG-parse time

        self.job_name, self.job_error, self.log_tail = job_name, job_error, log_tail
        super().__init__(failure_text(message, job_name, job_error, log_tail))  # the wording a plan's moves quote too


class TrainingJobFailed(GpuTrainingError):
    pass


class TrainingJobFailedNoRetry(TrainingJobFailed, AirflowFailException):
    """The user's code failed (or ran out its timeout) and the operator was not told to retry
    that (``retry_on_user_code_failure``): a run of many GPUs for hours is not repeated by habit."""


class TrainingJobTimedOut(TrainingJobFailedNoRetry):
    """The service ended the job when its ``scheduling.timeout`` (counted from its first
    RUNNING) ran out, as FAILED or as CANCELLED (Google's legacy ``maxRunningTime``: "cancels
    it"): a timeout, never "cancelled outside this task"; not retried by habit."""


class TrainingJobCancelled(GpuTrainingError, AirflowFailException):
    pass


class CapacityWaitExpired(GpuTrainingError):
    pass


class PreemptionBudgetExhausted(GpuTrainingError):
    pass


class PersistentResourceUnavailable(GpuTrainingError):
    pass


class PersistentCapacityTimeout(GpuTrainingError):
    pass


class VertexUnreachable(GpuTrainingError):
    pass


class CapacityUnavailable(GpuTrainingError):
    pass


class DeadlineExceeded(GpuTrainingError, AirflowFailException):
    pass


class BudgetExceeded(GpuTrainingError, AirflowFailException):
    """No step fits: each was over its ``max_price_per_gpu_hour`` or expected to cost more than
    what is left of ``budget=``; the message names each step's reason."""


class QuotaTooLow(GpuTrainingError):
    """The job needs more GPUs than the quota allows: from the preflight (before any create:
    names the metric, region, limit and need) or from the service's own refusal (names the
    metric); both say how to ask for more. An Airflow retry reads the quota again (no GPU is held
    meanwhile), so a quota raised before it lets the task run without a clear."""


class InvalidTrainingSpec(AirflowFailException):
    """The job spec breaks rules (``violations``: every one, each naming its field)."""

    def __init__(self, violations: list, what: str = "training job"):
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"invalid {what} ({len(self.violations)} problem(s)):\n{lines}")
