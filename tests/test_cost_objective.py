"""region_order="cheapest", plan_objective="cost"|"time" and max_wait_duration="observed": the pure
decisions (property tests) and the wire (dag.test against the emulator: the job created is in the
region the decision put first, with the wait it learned)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_sched.orchestration import observed
from airflow_gpu_sched.orchestration.cheapest import cheapest_order
from airflow_gpu_sched.orchestration.learned_wait import (HEADROOM, MIN_SAMPLES, MIN_SHARED_WAIT, MIN_USEFUL_WAIT,
                                                         MIN_WAIT, SKIP, learned_wait, share_slack)
from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from airflow_gpu_sched.orchestration.plans import FlexStartStep, PlanError, parse_step
from tests.airflow_harness import run_dag
from tests.conftest import FAST, PROJECT
from tests.test_region_order import no_history  # noqa: F401 (fixture)

NOW = datetime(2026, 6, 1, 3, 0, tzinfo=timezone.utc)
A, B = "us-central1", "us-east4"
L4 = "NVIDIA_L4"


def seen(region: str, to_running: float | None, *, strategy: str = "FLEX_START", days_ago: float = 1,
         preemptions: int = 0, accelerator: str = L4, now: datetime = NOW) -> dict:
    return {"region": region, "accelerator": accelerator, "at": (now - timedelta(days=days_ago)).isoformat(),
            "to_running": to_running, "waited": 7200.0 if to_running is None else to_running,
            "stockout": to_running is None, "preemptions": preemptions, "strategy": strategy}


# ------------------------------------------------------------------ learned waits (pure)

waits_st = st.lists(st.one_of(st.none(), st.floats(min_value=0, max_value=90_000, allow_nan=False)), max_size=12)
max_st = st.one_of(st.none(), st.integers(min_value=1, max_value=86_400 * 2).map(lambda s: timedelta(seconds=s)))


@settings(max_examples=300, deadline=None)
@given(waits_st, max_st)
def test_a_learned_wait_is_never_over_the_users_max_and_never_under_the_minimum_when_learned(waits, most):
    history = [seen(A, w, days_ago=1 + (len(waits) - i) / 100) for i, w in enumerate(waits)]  # oldest first
    found = learned_wait(history, A, L4, NOW, most)
    ran = [w for w in waits[-observed.PER_REGION:] if w is not None]
    assert found.samples == len(ran) and found.stockouts == len(waits[-observed.PER_REGION:]) - len(ran)
    if most is not None:
        assert found.wait <= most
    if found.quantile is None:  # too few jobs seen RUNNING: the user's max, else the service's default
        assert len(ran) < MIN_SAMPLES
        assert found.wait == (most if most is not None else timedelta(days=1))
    else:  # stockouts never lengthen it: waiting longer there did not help
        assert found.quantile in ran
        assert found.wait >= min(MIN_WAIT, most or MIN_WAIT)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.floats(min_value=0, max_value=20_000)), st.booleans()), max_size=8),
       st.floats(min_value=-10_000, max_value=50_000))
def test_shared_waits_fit_the_slack_after_the_bounds_of_the_others_or_the_position_is_skipped(tried, slack):
    shared = share_slack(tried, slack)
    learned = [(w, own) for (own, is_learned), w in zip(tried, shared) if is_learned]
    assert [w for (own, is_learned), w in zip(tried, shared) if not is_learned] == [o for o, l in tried if not l]
    for w, own in learned:  # skipped (never sent: 0 would ask FLEX_START to wait forever), or a useful wait
        useful = min(MIN_USEFUL_WAIT.total_seconds(), max(own or math.inf, MIN_SHARED_WAIT.total_seconds()))
        assert w == SKIP or w >= useful
        assert w <= max(own or math.inf, MIN_SHARED_WAIT.total_seconds())  # None / 0: unbounded, takes what is left
    room = slack - sum(o or 0.0 for o, l in tried if not l)
    assert sum(w for w, _ in learned) <= max(room, 0.0) + MIN_SHARED_WAIT.total_seconds() * len(learned) + 1e-6


def test_a_position_left_less_than_a_useful_wait_is_skipped_not_submitted_with_a_one_minute_wait():
    hour = 3600.0
    # 2 h of slack, a 30-minute SPOT bound: us-central1 takes its 80 min, us-east4 gets the 10 left, us-west1 nothing
    assert share_slack([(80 * 60, True), (60 * 60, True), (hour, True), (1800.0, False)], 2 * hour) == \
        [80 * 60, MIN_USEFUL_WAIT.total_seconds(), SKIP, 1800.0]
    assert share_slack([(80 * 60, True), (60 * 60, True)], 85 * 60) == [80 * 60, SKIP]  # 5 min left: no chance
    assert share_slack([(4 * 60, True)], 5 * 60) == [4 * 60]  # the user allows 4 min: their wait, not a skip
    assert share_slack([(None, True)], hour) == [hour]  # unbounded: all that is left


def test_the_plan_skips_a_flex_start_region_whose_share_of_the_slack_is_skip_and_says_why():
    from airflow_gpu_sched.orchestration.plan_types import Plan, deadline_budget

    step = FlexStartStep(locations=(A, B), observed_wait=True, max_wait_duration=timedelta(hours=2),
                         learned_waits=((A, timedelta(minutes=50)), (B, timedelta(seconds=SKIP))))
    plan = Plan.of([step], A, True, project=PROJECT, deadline=NOW + timedelta(hours=8),
                   expected_run_time=timedelta(hours=4))
    assert deadline_budget(plan, step, NOW, A) == (timedelta(minutes=50), None)
    wait, why = deadline_budget(plan, step, NOW, B)
    assert wait is None and "us-east4" in why and "skipped" in why and "useful" in why


def test_a_spot_step_with_observed_preemptions_needs_its_wasted_runs_before_the_deadline():
    from airflow_gpu_sched.orchestration.plan_types import Plan, deadline_budget
    from airflow_gpu_sched.orchestration.plans import SpotStep

    step = SpotStep(locations=(A, B), observed_preemptions=((A, 2.0),))
    plan = Plan.of([step], A, True, project=PROJECT, deadline=NOW + timedelta(hours=5),
                   expected_run_time=timedelta(hours=3))
    assert deadline_budget(plan, step, NOW, B) == (timedelta(hours=2), None)  # 5 h left, 3 h run
    wait, why = deadline_budget(plan, step, NOW, A)  # two preemptions: 3 h x (1 + 2 x 0.5) = 6 h > 5 h
    assert wait is None and "SPOT skipped" in why


def test_the_learned_wait_is_the_90th_percentile_with_headroom_from_flex_start_samples_of_that_region():
    history = [seen(A, s) for s in (300, 400, 500, 600, 1200)] + [seen(A, None)] + [  # one that never ran
        seen(A, 50_000, strategy="STANDARD"),  # not a DWS wait: ignored while FLEX_START samples exist
        seen(B, 20_000), seen(A, 900, accelerator="NVIDIA_H100_80GB")]
    found = learned_wait(history, A, L4, NOW, timedelta(hours=4))
    assert (found.samples, found.stockouts, found.quantile) == (5, 1, 1200)
    assert found.wait == timedelta(seconds=1200 * HEADROOM)
    assert "p90 1200s of 5 job(s) seen RUNNING x 1.5" in str(found) and "1 never RUNNING" in str(found)
    assert learned_wait(history, A, L4, NOW, timedelta(minutes=20)).wait == timedelta(minutes=20)  # the max clips it
    assert learned_wait(history, B, L4, NOW, timedelta(hours=4)).wait == timedelta(hours=4)  # 1 sample: the max
    old = [seen(A, 100, days_ago=40)] * 5  # older than MAX_AGE: not a sample
    assert learned_wait(old, A, L4, NOW, None).quantile is None


def test_max_wait_duration_observed_is_parsed_with_its_max_and_bad_text_names_the_field():
    step = parse_step({"strategy": "FLEX_START", "max_wait_duration": "observed:2h", "locations": [A, B]})
    assert isinstance(step, FlexStartStep) and step.observed_wait and step.max_wait_duration == timedelta(hours=2)
    assert parse_step({"strategy": "FLEX_START", "max_wait_duration": "observed"}).max_wait_duration == timedelta(days=1)
    with pytest.raises(PlanError, match=r"plan\[0\]\.max_wait_duration"):
        parse_step({"strategy": "FLEX_START", "max_wait_duration": "observed:soon"})
    with pytest.raises(PlanError, match=r"plan\[0\]\.learned_waits: is not an argument"):
        parse_step({"strategy": "FLEX_START", "learned_waits": [[A, 60]]})  # decided from the history, not given
    assert parse_step({"strategy": "SPOT", "region_order": "cheapest", "locations": [A, B]}).region_order == "cheapest"


# ------------------------------------------------------------------ the cheapest order (pure, beyond test_cheapest)

@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([A, B, "europe-west4", "asia-east1"]), min_size=1, max_size=4, unique=True).map(tuple),
       st.floats(min_value=0.1, max_value=10), st.floats(min_value=60, max_value=30_000),
       st.one_of(st.none(), st.floats(min_value=0, max_value=80_000)))
def test_with_no_history_and_one_price_everywhere_it_is_the_users_order(regions, price, run, left):
    order, inputs = cheapest_order(regions, {r: price for r in regions}, {}, run, left)
    assert order == regions
    assert all(c.feasible == (left is None or run <= left) for c in inputs)  # nothing observed: no wait assumed


def test_plan_objective_is_checked_when_the_dag_is_parsed():
    from airflow_gpu_sched.errors import InvalidTrainingSpec
    from airflow_gpu_sched.operators import GpuTrainingOperator

    with pytest.raises(InvalidTrainingSpec, match=r"plan_objective: must be one of cost, time"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=A, image_uri="gcr.io/p/t:1",
                            machine_type="g2-standard-8", accelerator_type=L4, accelerator_count=1,
                            plan=[{"strategy": "STANDARD"}], plan_objective="cheap")


# ------------------------------------------------------------------ the wire

def store(history: list[dict]) -> None:
    from airflow.models import Variable

    for i, entry in enumerate(history):
        Variable.set(f"{observed.VARIABLE}.{observed.OBSERVATION}.20260101T000000.seed{i}", {**entry, "id": f"seed{i}"},
                     serialize_json=True)


def jobs_in(emulator, region: str) -> list[dict]:
    return requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{region}/customJobs",
                        timeout=5).json().get("customJobs", [])


def operator(dag_kwargs: dict, **kwargs):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return GpuTrainingOperator(task_id="train", project_id=PROJECT, location=A, image_uri="gcr.io/p/t:1",
                               machine_type="g2-standard-8", accelerator_type=L4, accelerator_count=1,
                               poll_interval=0.02, **dag_kwargs, **kwargs)


PRICES = {"currency": "USD", L4: {"STANDARD": 1.0, "FLEX_START": 0.6},
          "by_region": {A: {L4: {"STANDARD": 1.2}}, B: {L4: {"STANDARD": 0.7}}}}


def test_region_order_cheapest_creates_the_job_in_the_cheaper_region_first(airflow_db, fast_emulator, no_history):
    from airflow.sdk import DAG

    fast_emulator.reset(FAST)
    now = datetime.now(timezone.utc)
    store([seen(A, 60.0, strategy="STANDARD", now=now), seen(B, 60.0, strategy="STANDARD", now=now)])  # both deliver
    with DAG("cheapest_order", schedule=None, start_date=NOW) as dag:
        operator({}, prices=PRICES, plan=[{"strategy": "STANDARD", "locations": [A, B], "region_order": "cheapest"}])
    result = run_dag(dag, logical_date=NOW)
    assert result.state == "success"
    assert [a["location"] for a in result["train"].return_value["attempts"]] == [B]
    assert (len(jobs_in(fast_emulator, A)), len(jobs_in(fast_emulator, B))) == (0, 1)
    assert result.task_state_store["train"][LEDGER_KEY]["region_orders"] == {"0": [B, A]}


def test_plan_objective_cost_skips_the_cheap_region_whose_waits_miss_the_deadline(airflow_db, fast_emulator,
                                                                                  no_history):
    from airflow.sdk import DAG

    fast_emulator.reset(FAST)
    now = datetime.now(timezone.utc)
    store([seen(B, 3 * 3600.0, strategy="STANDARD", now=now) for _ in range(3)]  # B: 3 h to RUNNING lately
          + [seen(A, 60.0, strategy="STANDARD", now=now) for _ in range(3)])
    with DAG("cost_objective", schedule=None, start_date=NOW) as dag:
        operator({}, prices=PRICES, plan=[{"strategy": "STANDARD", "locations": [B, A]}], plan_objective="cost",
                 deadline=now + timedelta(hours=2), expected_run_time=timedelta(minutes=30))
    result = run_dag(dag, logical_date=NOW)
    assert result.state == "success"
    assert [a["location"] for a in result["train"].return_value["attempts"]] == [A]  # dearer, but in time
    assert (len(jobs_in(fast_emulator, A)), len(jobs_in(fast_emulator, B))) == (1, 0)
    assert result.task_state_store["train"][LEDGER_KEY]["region_orders"] == {"0": [A, B]}


def test_region_order_cheapest_with_no_history_keeps_the_users_order(airflow_db, fast_emulator, no_history):
    from airflow.sdk import DAG

    fast_emulator.reset(FAST)
    with DAG("cheapest_unobserved", schedule=None, start_date=NOW) as dag:
        operator({}, prices=PRICES, plan=[{"strategy": "STANDARD", "locations": [A, B], "region_order": "cheapest"}])
    result = run_dag(dag, logical_date=NOW)
    assert [a["location"] for a in result["train"].return_value["attempts"]] == [A]  # B is cheaper, but unobserved
    assert (len(jobs_in(fast_emulator, A)), len(jobs_in(fast_emulator, B))) == (1, 0)


def test_plan_objective_time_with_no_history_keeps_the_users_order(airflow_db, fast_emulator, no_history):
    from airflow.sdk import DAG

    fast_emulator.reset(FAST)
    with DAG("time_objective", schedule=None, start_date=NOW) as dag:
        operator({}, prices=PRICES, plan=[{"strategy": "STANDARD", "locations": [A, B]}], plan_objective="time")
    result = run_dag(dag, logical_date=NOW)
    assert [a["location"] for a in result["train"].return_value["attempts"]] == [A]
    assert result.task_state_store["train"][LEDGER_KEY]["region_orders"] == {"0": [A, B]}


def test_max_wait_duration_observed_submits_the_learned_wait_of_the_region(airflow_db, fast_emulator, no_history):
    from airflow.sdk import DAG

    fast_emulator.reset(FAST)
    now = datetime.now(timezone.utc)
    store([seen(A, s, now=now) for s in (200.0, 400.0, 600.0)])  # FLEX_START waits seen in A
    with DAG("learned_wait", schedule=None, start_date=NOW) as dag:
        operator({}, plan=[{"strategy": "FLEX_START", "max_wait_duration": "observed:4h", "locations": [A, B]}])
    result = run_dag(dag, logical_date=NOW)
    assert result.state == "success"
    [job] = jobs_in(fast_emulator, A)
    assert job["jobSpec"]["scheduling"]["maxWaitDuration"] == f"{600 * HEADROOM:.0f}s"
    assert result.task_state_store["train"][LEDGER_KEY]["learned_waits"] == {"0": {A: 900.0, B: 4 * 3600.0}}


def test_the_budget_counts_the_preemptions_a_spot_step_observed_in_its_region():
    from airflow_gpu_sched.orchestration.budget import Budget, estimate
    from airflow_gpu_sched.orchestration.plans import SpotStep

    budget = Budget(remaining=100.0, prices={"currency": "USD", L4: {"SPOT": 1.0}}, demand=((L4, 2),),
                    expected_run_time=timedelta(hours=3))
    step = SpotStep(locations=(A, B), observed_preemptions=((A, 2.0), (B, 0.0)))
    assert estimate(budget, step, A).cost == 1.0 * 2 * 3 * (1 + 0.5 * 2)  # two preemptions: a whole run again
    assert estimate(budget, step, B).cost == 6.0
    assert estimate(budget, SpotStep(), A).cost == 6.0  # nothing observed: the budget's own rate (0)


def test_the_flex_start_operator_takes_an_observed_wait_with_its_max():
    from airflow_gpu_sched.errors import InvalidTrainingSpec
    from airflow_gpu_sched.operators import FlexStartTrainingOperator

    args = dict(project_id=PROJECT, location=A, image_uri="gcr.io/p/t:1", machine_type="g2-standard-8",
                accelerator_type=L4, accelerator_count=1)
    [step] = FlexStartTrainingOperator(task_id="t", max_wait_duration="observed:3h", **args).plan
    assert step.observed_wait and step.max_wait_duration == timedelta(hours=3)
    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\]\.max_wait_duration: 'never' is not a duration"):
        FlexStartTrainingOperator(task_id="t2", max_wait_duration="observed:never", **args)
