"""region_order="cheapest"'s pure decision (orchestration/cheapest.py), with property tests."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_sched.orchestration import observed
from airflow_gpu_sched.orchestration.cheapest import cheapest_order, history_stats

REGIONS = ["us-central1", "us-east4", "europe-west4", "asia-southeast1", "us-west1"]
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)

regions_st = st.lists(st.sampled_from(REGIONS), min_size=1, max_size=5, unique=True).map(tuple)
price_st = st.one_of(st.none(), st.floats(min_value=0, max_value=20, allow_nan=False))
stat_st = st.one_of(st.tuples(st.floats(min_value=0, max_value=50_000, allow_nan=False),
                              st.floats(min_value=0, max_value=5, allow_nan=False)),
                    st.tuples(st.floats(min_value=0, max_value=50_000, allow_nan=False),
                              st.floats(min_value=0, max_value=5, allow_nan=False),
                              st.floats(min_value=0, max_value=1, allow_nan=False)))  # with the share delivered


@st.composite
def cases(draw):
    regions = draw(regions_st)
    prices = {r: draw(price_st) for r in regions}
    stats = {r: draw(stat_st) for r in regions if draw(st.booleans())}
    run = draw(st.floats(min_value=60, max_value=30_000, allow_nan=False))
    left = draw(st.one_of(st.none(), st.floats(min_value=0, max_value=80_000, allow_nan=False)))
    return regions, prices, stats, run, left


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_order_is_a_permutation_and_never_puts_a_late_region_first_when_one_can_finish(case):
    regions, prices, stats, run, left = case
    order, inputs = cheapest_order(regions, prices, stats, run, left)
    assert sorted(order) == sorted(regions) and [c.region for c in inputs] == list(order)
    feasible = [c.feasible for c in inputs]
    if any(feasible):
        assert inputs[0].feasible
    assert feasible == sorted(feasible, reverse=True)  # every region that can finish before any that cannot


@settings(max_examples=300, deadline=None)
@given(cases())
def test_feasible_regions_with_a_price_come_cheapest_first(case):
    regions, prices, stats, run, left = case
    order, inputs = cheapest_order(regions, prices, stats, run, left)
    if not stats:  # nothing observed in any of them: the user's order, whatever the prices
        assert order == regions
        return
    known = [c.expected_cost for c in inputs if c.feasible and c.expected_cost is not None]
    assert known == sorted(known)
    positions = [i for i, c in enumerate(inputs) if c.feasible]
    unknown = [i for i in positions if inputs[i].expected_cost is None]
    assert all(u > k for u in unknown for k in positions if inputs[k].expected_cost is not None)


@settings(max_examples=200, deadline=None)
@given(regions_st, st.floats(min_value=60, max_value=30_000, allow_nan=False),
       st.one_of(st.none(), st.floats(min_value=0, max_value=80_000, allow_nan=False)))
def test_with_no_prices_and_no_history_it_is_the_users_order(regions, run, left):
    order, _ = cheapest_order(regions, {}, {}, run, left)
    assert order == regions


def test_history_gives_waits_with_stockouts_penalised_and_preemptions_per_run():
    history = [
        {"region": "us-east4", "accelerator": "NVIDIA_L4", "at": NOW.isoformat(), "to_running": 100.0,
         "waited": 100.0, "stockout": False, "preemptions": 2},
        {"region": "us-east4", "accelerator": "NVIDIA_L4", "at": NOW.isoformat(), "to_running": None,
         "waited": 300.0, "stockout": True, "preemptions": 0},
        {"region": "us-central1", "accelerator": "NVIDIA_H100_80GB", "at": NOW.isoformat(), "to_running": 5.0,
         "waited": 5.0, "stockout": False, "preemptions": 0},
    ]
    stats = history_stats(("us-central1", "us-east4"), "NVIDIA_L4", history, NOW)
    assert stats == {"us-east4": ((100.0 + 300.0 + observed.STOCKOUT_PENALTY) / 2, 1.0, 0.5)}
    # us-east4 is cheaper per hour but its preemptions and its wait (past the time left) put it last
    order, inputs = cheapest_order(("us-east4", "us-central1"), {"us-east4": 1.0, "us-central1": 1.8}, stats,
                                   run_seconds=3600, time_left=3 * 3600)  # 7400 s wait + 3600 s run > 3 h
    assert order == ("us-central1", "us-east4") and not inputs[1].feasible
    order, _ = cheapest_order(("us-central1", "us-east4"), {"us-east4": 1.0, "us-central1": 1.8}, stats,
                              run_seconds=3600, time_left=None)
    assert order == ("us-central1", "us-east4")  # no deadline: 1.0 x 1.5 (a preemption per run) / 0.5 delivered > 1.8
    order, _ = cheapest_order(("us-central1", "us-east4"), {"us-east4": 1.0, "us-central1": 3.5}, stats,
                              run_seconds=3600, time_left=None)
    assert order == ("us-east4", "us-central1")  # 3.0 per run delivered < 3.5


def test_a_steps_order_reads_its_own_strategys_jobs_not_the_standard_fallbacks_in_the_same_region():
    def entry(strategy, ran):
        return {"region": "us-central1", "accelerator": "NVIDIA_L4", "at": NOW.isoformat(), "strategy": strategy,
                "to_running": 900.0 if ran else None, "waited": 900.0 if ran else 7200.0, "stockout": not ran,
                "preemptions": 0}
    # each night FLEX_START expired in us-central1 and the plan fell back to STANDARD there, which started
    history = [e for _ in range(4) for e in (entry("FLEX_START", False), entry("STANDARD", True))]
    mixed = history_stats(("us-central1",), "NVIDIA_L4", history, NOW)
    flex = history_stats(("us-central1",), "NVIDIA_L4", history, NOW, "FLEX_START")
    assert mixed["us-central1"][2] == 0.5  # the STANDARD starts would make the DWS queue look half reliable
    assert flex["us-central1"][2] == 0.0 and flex["us-central1"][0] == 7200.0 + observed.STOCKOUT_PENALTY
    # a strategy never tried there: all of the region's jobs, as before
    assert history_stats(("us-central1",), "NVIDIA_L4", history, NOW, "SPOT") == mixed
    order, _ = cheapest_order(("us-central1", "us-east4"), {"us-central1": 4.0, "us-east4": 4.6},
                              {**flex, "us-east4": (3600.0, 0.0, 0.9)}, run_seconds=4 * 3600, time_left=8 * 3600)
    assert order == ("us-east4", "us-central1")


@settings(max_examples=300, deadline=None)
@given(cases(), st.floats(min_value=0, max_value=40, allow_nan=False))
def test_with_a_last_resort_a_miss_costs_its_run_and_the_deadline_still_comes_first(case, fallback):
    regions, prices, stats, run, left = case
    order, inputs = cheapest_order(regions, prices, stats, run, left, fallback)
    assert sorted(order) == sorted(regions)
    feasible = [c.feasible for c in inputs]
    assert feasible == sorted(feasible, reverse=True)
    for c in inputs:  # between the region's own run and the last resort's
        if c.expected_cost is not None:
            runs = (prices[c.region] * run / 3600 * (1 + 0.5 * c.preemptions), fallback * run / 3600)
            assert min(runs) - 1e-6 <= c.expected_cost <= max(runs) + 1e-6
    if not any(r in stats for r in regions):
        assert order == regions


def test_a_cheap_region_that_rarely_delivers_goes_after_a_dearer_reliable_one_when_the_last_resort_is_dear():
    stats = {"us-west1": (3600.0, 0.0, 0.4), "us-east4": (3600.0, 0.0, 0.9)}
    prices = {"us-west1": 3.2, "us-east4": 4.6}
    order, inputs = cheapest_order(("us-west1", "us-east4"), prices, stats, 4 * 3600, 8 * 3600, fallback=9.0)
    assert order == ("us-east4", "us-west1")  # 0.9 x 4.6 + 0.1 x 9 = 5.04 < 0.4 x 3.2 + 0.6 x 9 = 6.68 per hour
    assert round(inputs[0].expected_cost, 6) == round(4 * (0.9 * 4.6 + 0.1 * 9.0), 6)
    order, _ = cheapest_order(("us-west1", "us-east4"), prices, stats, 4 * 3600, 8 * 3600, fallback=3.5)
    assert order == ("us-west1", "us-east4")  # a cheap last resort: a miss costs little, the cheap region first
