"""Which deployment a job belongs to (orchestration/deployment.py): the id's rules and the owner
decision. The Variable, created by the first submitting task, is tested through dag.test() in
tests/test_cli_platform.py (test_jobs_are_labelled_with_the_deployment_that_created_them)."""

from __future__ import annotations

import pytest

from airflow_gpu_sched.orchestration import deployment
from airflow_gpu_sched.orchestration.orphans import JobRow, TaskInstanceRow, find_orphans

@pytest.mark.parametrize("value", ["Prod", "prod eu", "p" * 64, "prod.eu", "é"])
def test_a_deployment_id_that_is_not_a_label_value_is_refused_naming_the_option(value):
    with pytest.raises(deployment.DeploymentIdError, match=r"\[gpu_sched\] deployment_id .* is not a label value"):
        deployment.checked(value)


def test_the_option_wins_and_a_bad_variable_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", " prod-eu_1 ")
    assert deployment.configured() == deployment.current() == "prod-eu_1"  # no Variable read
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "")
    assert deployment.configured() is None
    with pytest.raises(deployment.DeploymentIdError, match="the Variable airflow_gpu_sched_deployment_id 'X'"):
        deployment.from_variable("X")


def test_outside_a_task_without_the_option_the_id_is_an_error_naming_the_option(monkeypatch):
    monkeypatch.delenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", raising=False)
    with pytest.raises(deployment.DeploymentIdError, match=r"set \[gpu_sched\] deployment_id"):
        deployment.current()


def _row(name: str, deployment_label: str | None) -> JobRow:
    return JobRow(name, "custom_job", "d", "t", None, "r", "1", None, "JOB_STATE_RUNNING", None, None, None,
                  deployment=deployment_label)


def test_only_this_deployments_orphans_are_cancellable_and_none_without_knowing_which_it_is():
    jobs = [_row("mine", "staging"), _row("theirs", "prod"), _row("old", None)]
    failed = [TaskInstanceRow("d", "t", -1, "r", "failed", 1)]
    found = {o.job.name: (o.owner, o.cancellable) for o in find_orphans(jobs, failed, "staging")}
    assert found == {"mine": ("this deployment", True), "theirs": ("other deployment", False),
                     "old": ("unknown", False)}
    assert not any(o.cancellable for o in find_orphans(jobs, failed))  # no id given: nothing is ours
