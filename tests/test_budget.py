"""Budgets: a step's max_price_per_gpu_hour, the task's budget=, the pure decision
(orchestration/budget.py) and the operator at the wire: a step that does not fit is skipped and
no job is created for it; none fits -> BudgetExceeded before any GPU is asked for."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_gpu_sched.operators import GpuTrainingOperator
from airflow_gpu_sched.orchestration.budget import Budget, estimate, refusal, rows
from airflow_gpu_sched.orchestration.errors import BudgetExceeded, InvalidTrainingSpec
from airflow_gpu_sched.orchestration.plans import parse_plan, parse_step
from tests.conftest import LOCATION, PROJECT
from tests.test_operators import context
from tests.test_observed_history import history  # noqa: F401 (fixture: the Task SDK's Variables, in process)
from tests.test_plans import COMMON

PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 1.0, "SPOT": 1.5, "STANDARD": 3.0},
          "by_region": {"us-east4": {"NVIDIA_TESLA_A100": {"STANDARD": 2.0}}}}
HOUR = timedelta(hours=1)


def _budget(remaining=None, run=HOUR, gpus=2, preemptions=0.0, prices=PRICES, spent=0.0) -> Budget:
    return Budget(remaining, prices, (("NVIDIA_TESLA_A100", gpus),), run, preemptions, spent)


def test_expected_cost_is_price_times_gpus_times_run_time():
    step = parse_step({"strategy": "STANDARD"})
    assert estimate(_budget(), step, LOCATION).cost == pytest.approx(6.0)  # 3.0 x 2 GPUs x 1 h
    assert estimate(_budget(), step, "us-east4").cost == pytest.approx(4.0)  # the region's price wins
    assert estimate(_budget(run=timedelta(minutes=30)), step, LOCATION).cost == pytest.approx(3.0)


def test_a_spot_step_adds_half_a_run_per_expected_preemption_and_a_race_costs_its_dearest_member():
    spot = parse_step({"strategy": "SPOT"})
    assert estimate(_budget(preemptions=2), spot, LOCATION).cost == pytest.approx(1.5 * 2 * 2)
    race = parse_plan([{"race": [{"strategy": "FLEX_START"}, {"strategy": "STANDARD", "locations": ["us-east4"]}]}])[0]
    assert estimate(_budget(), race, LOCATION).cost == pytest.approx(4.0)


@pytest.mark.parametrize("remaining, allowed", [(5.99, False), (6.0, True), (None, True)])
def test_a_step_over_what_is_left_is_refused_with_its_numbers(remaining, allowed):
    why = refusal(_budget(remaining, spent=1.0), parse_step({"strategy": "STANDARD"}), LOCATION)
    assert (why is None) == allowed
    if not allowed:
        assert why == ("STANDARD in us-central1: expected cost 6 USD is over what is left of the budget "
                       "(5.99 of 6.99)")


def test_a_price_cap_refuses_dearer_regions_and_unknown_prices():
    step = parse_step({"strategy": "STANDARD", "max_price_per_gpu_hour": 2.5})
    assert "3 USD per GPU-hour is over max_price_per_gpu_hour=2.5" in refusal(_budget(), step, LOCATION)
    assert refusal(_budget(), step, "us-east4") is None
    unknown = parse_step({"strategy": "SPOT", "max_price_per_gpu_hour": 9})
    assert "no price known" in refusal(_budget(prices={"currency": "USD"}), unknown, LOCATION)
    assert refusal(None, step, LOCATION) is None


def test_plan_check_rows_say_each_steps_cost_and_whether_it_fits():
    steps = parse_plan([{"strategy": "FLEX_START"}, {"strategy": "STANDARD", "locations": ["us-central1", "us-east4"]}])
    found = rows(_budget(4.5), [(steps[0], LOCATION), (steps[1], "us-central1"), (steps[1], "us-east4")])
    assert [(r["expected_cost"], r["allowed"]) for r in found] == [(2.0, True), (6.0, False), (4.0, True)]


@pytest.mark.parametrize("value", [-1, "cheap", True])
def test_max_price_per_gpu_hour_is_validated_naming_the_field(value):
    with pytest.raises(InvalidTrainingSpec) as raised:
        GpuTrainingOperator(task_id="t", plan=[{"strategy": "STANDARD", "max_price_per_gpu_hour": value}], **COMMON)
    assert "plan[0].max_price_per_gpu_hour" in str(raised.value) and "number >= 0" in str(raised.value)


@pytest.mark.parametrize("kwargs, field, words", [
    ({"budget": -3, "expected_run_time": "1h"}, "budget", "must be a number >= 0"),
    ({"budget": 10}, "budget", "needs expected_run_time"),
    ({"run_budget": {"name": "gpu", "limit": 5}}, "run_budget", "needs expected_run_time"),
    ({"run_budget": {"name": "a b", "limit": 5}, "expected_run_time": "1h"}, "run_budget.name", "letters, digits"),
    ({"run_budget": {"name": "gpu", "limit": "lots"}, "expected_run_time": "1h"}, "run_budget.limit", ">= 0"),
    ({"run_budget": {"name": "gpu"}, "expected_run_time": "1h"}, "run_budget", "RunBudget(name, limit)"),
])
def test_budget_is_validated_naming_the_field(kwargs, field, words):
    with pytest.raises(InvalidTrainingSpec) as raised:
        GpuTrainingOperator(task_id="t", plan=[{"strategy": "STANDARD"}], **kwargs, **COMMON)
    assert f"{field}: " in str(raised.value) and words in str(raised.value)


# ------------------------------------------------------------------ at the wire

def test_a_step_over_the_budget_is_skipped_and_the_next_one_runs(fast_emulator):
    op = GpuTrainingOperator(task_id="t", deferrable=False, prices=PRICES, budget=0.2, expected_run_time="6m",
                             plan=[{"strategy": "STANDARD"}, {"strategy": "FLEX_START"}],
                             env={"EMULATOR_RUN_SECONDS": "360"}, **COMMON)
    result = op.execute(context())
    assert fast_emulator.stats()["jobsCreated"] == {"FLEX_START": 1}  # STANDARD (0.3 expected) never created
    assert [a["strategy"] for a in result["attempts"] if a.get("job_name")] == ["FLEX_START"]
    assert result["cost"] == pytest.approx(0.1, abs=0.005)


def test_no_step_fits_fails_with_budget_exceeded_before_any_job(fast_emulator):
    op = GpuTrainingOperator(task_id="t", deferrable=False, prices=PRICES, budget=0.05, expected_run_time="6m",
                             plan=[{"strategy": "STANDARD"}, {"strategy": "SPOT", "max_price_per_gpu_hour": 1.0}],
                             **COMMON)
    with pytest.raises(BudgetExceeded) as raised:
        op.execute(context())
    assert "max_price_per_gpu_hour=1" in str(raised.value)
    assert fast_emulator.stats()["jobsCreated"] == {}
    assert fast_emulator.stats()["requests"].get("customJobs.create", 0) == 0


def test_a_retry_counts_what_earlier_attempts_spent(fast_emulator):
    from tests.test_operators import Store

    store = Store()
    first = GpuTrainingOperator(task_id="t", deferrable=False, prices=PRICES, budget=0.5, expected_run_time="6m",
                                plan=[{"strategy": "STANDARD"}], env={"EMULATOR_RUN_SECONDS": "360",
                                                                      "EMULATOR_EXIT_CODE": "1"},
                                retry_on_user_code_failure=True, **COMMON)
    with pytest.raises(Exception):
        first.execute(context(store))
    # the failed job ran 6 minutes at 3.0: 0.3 spent, 0.2 left; another 0.3 does not fit
    again = GpuTrainingOperator(task_id="t", deferrable=False, prices=PRICES, budget=0.5, expected_run_time="6m",
                                plan=[{"strategy": "STANDARD"}], retry_on_user_code_failure=True, **COMMON)
    with pytest.raises(BudgetExceeded) as raised:
        again.execute(context(store))
    assert "(0.2 of 0.5)" in str(raised.value)
    assert fast_emulator.stats()["jobsCreated"] == {"STANDARD": 1}


def test_a_run_budget_is_shared_by_the_tasks_of_one_dag_run(fast_emulator, history):
    """Two tasks of one run name the same RunBudget (0.5): the first reserves its dearest step
    (0.3), runs and settles what it spent; the second's 0.3 no longer fits: BudgetExceeded, no
    job. Another run has its own budget. (Variables: the in-process Execution API, as a task has them.)"""
    from airflow_gpu_sched.orchestration.run_budget import RunBudget
    from tests.test_operators import Store
    from tests.test_run_budget import _clean_variables

    _clean_variables()
    history(writers=1)
    shared = RunBudget("gpu", 0.5, settle=0.2)

    def task(task_id: str, run_id: str) -> GpuTrainingOperator:
        return GpuTrainingOperator(task_id=task_id, deferrable=False, prices=PRICES, expected_run_time="6m",
                                   run_budget=shared, plan=[{"strategy": "STANDARD"}],
                                   env={"EMULATOR_RUN_SECONDS": "360"}, **COMMON)

    first = task("train", "run-1").execute({"task_state_store": Store(), "run_id": "run-1"})
    assert first["cost"] == pytest.approx(0.3, abs=0.005)
    with pytest.raises(BudgetExceeded) as raised:
        task("evaluate", "run-1").execute({"task_state_store": Store(), "run_id": "run-1"})
    assert "run budget 'gpu': a reservation of 0.3 was refused" in str(raised.value)
    assert fast_emulator.stats()["jobsCreated"] == {"STANDARD": 1}
    task("evaluate", "run-2").execute({"task_state_store": Store(), "run_id": "run-2"})
    assert fast_emulator.stats()["jobsCreated"] == {"STANDARD": 2}
    _clean_variables()


def test_a_task_cleared_after_a_failed_run_counts_that_runs_spend_in_the_run_budget(fast_emulator, history):
    """The run budget (0.7) after a clear: the failed run spent 0.3 (a 6-minute job at 3.0 that
    exited 1). Its reservation kept as it was, the new run re-used it and another task of the
    run got money already spent (0.3 + 0.3 + 0.3 > 0.7). Now the failed run's spend is settled
    into its key when the new run starts, the new run reserves on top (0.6) and runs, and the
    other task's 0.3 is refused."""
    from airflow_gpu_sched.orchestration.errors import TrainingJobFailed
    from airflow_gpu_sched.orchestration.run_budget import RunBudget
    from tests.test_operators import Store
    from tests.test_retries import _Ti
    from tests.test_run_budget import _clean_variables

    _clean_variables()
    history(writers=1)
    shared = RunBudget("gpu", 0.7, settle=0.2)

    def task(task_id: str, **env) -> GpuTrainingOperator:
        return GpuTrainingOperator(task_id=task_id, deferrable=False, prices=PRICES, expected_run_time="6m",
                                   run_budget=shared, plan=[{"strategy": "STANDARD"}],
                                   env={"EMULATOR_RUN_SECONDS": "360", **env}, **COMMON)

    store = Store()
    with pytest.raises(TrainingJobFailed):
        task("train", EMULATOR_EXIT_CODE="1").execute({"task_state_store": store, "run_id": "run-1", "ti": _Ti(1, 0)})
    again = task("train").execute({"task_state_store": store, "run_id": "run-1", "ti": _Ti(2, 1)})  # cleared
    assert again["cost"] == pytest.approx(0.3, abs=0.005) and len(again["attempts"]) == 1
    with pytest.raises(BudgetExceeded, match="a reservation of 0.3 was refused"):
        task("evaluate").execute({"task_state_store": Store(), "run_id": "run-1"})
    assert fast_emulator.stats()["jobsCreated"] == {"STANDARD": 2}
    _clean_variables()
