"""The orchestration on Airflow that the operators and triggers share: the capacity plan (plans.py),
the submission ledger (ledger.py), how a job ended (outcomes.py, failure_patterns.py), wait/run/GPU-hour
figures (accounting.py), the quota preflight (quota.py), metrics and callbacks (signals.py), per-poll
state (watch.py), the job types (job_types.py), building the job (job_spec.py) and the errors a task
fails with (errors.py).

May import: nothing of this package; airflow.
"""
