"""Hedged races (a plan's ``{"race": [...]}`` step) at the wire: ``dag.test()`` against the
emulator, asserting on the emulator's own records (which jobs it made, which it cancelled)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests

from tests.airflow_harness import run_dag
from tests.conftest import FAST, FORCED_VARIANTS, LOCATION, PROJECT, every_custom_job

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
EAST, WEST = "us-east4", "us-west1"
LEDGER = "airflow_gpu_sched.ledger"


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


def _operator(plan, cls=None, **kw):
    from airflow_gpu_sched.operators import GpuTrainingOperator

    return (cls or GpuTrainingOperator)(
        task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
        base_output_dir="gs://bucket/race", plan=plan, **{"poll_interval": 0.02, **A100, **kw})


def _jobs(emulator, location: str) -> list[dict]:
    return every_custom_job(emulator, location)


# job_state.proto: from CANCELLING "the job may only go to either JOB_STATE_SUCCEEDED,
# JOB_STATE_FAILED or JOB_STATE_CANCELLED" (the emulator's variant cancelOutcome)
CANCEL_OF_A_RUNNING_JOB_ENDS = {"JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}


def _every_job(emulator) -> list[dict]:
    return [j for loc in (LOCATION, EAST, WEST) for j in _jobs(emulator, loc)]


RACE = {"race": [{"strategy": "FLEX_START", "max_wait_duration": "2h"},
                 {"strategy": "FLEX_START", "max_wait_duration": "2h", "locations": [EAST]},
                 {"strategy": "SPOT", "locations": [WEST]}]}


def test_the_member_whose_region_has_capacity_wins_and_the_others_are_cancelled(airflow):
    from airflow.sdk import DAG

    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    airflow.set_capacity(EAST, "NVIDIA_TESLA_A100", flex_start=0)  # only us-west1's SPOT has GPUs
    with DAG("race_wins", schedule=None, start_date=START) as dag:
        _operator([RACE, {"strategy": "STANDARD"}])
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    jobs = {j["name"]: j for j in _every_job(airflow)}
    assert len(jobs) == 3 and airflow.stats()["jobsCreated"] == {"FLEX_START": 2, "SPOT": 1}
    winner = jobs[training["job_name"]]
    assert f"/locations/{WEST}/" in winner["name"] and winner["state"] == "JOB_STATE_SUCCEEDED"
    losers = [j for n, j in jobs.items() if n != winner["name"]]
    assert [j["state"] for j in losers] == ["JOB_STATE_CANCELLED"] * 2
    # every member has a startTime (set at admission, as on real Vertex): the one seen RUNNING won
    assert all("startTime" in j for j in jobs.values())
    assert all(a["running_since"] is None and a["gpu_hours"] == 0 for a in training["attempts"][:2])
    # accounting: each loser with its queued time, the winner last (the task's job)
    assert [a.get("race") for a in training["attempts"]] == ["lost", "lost", "won"]
    assert all(a["queued_seconds"] > 0 and a["run_seconds"] == 0 for a in training["attempts"][:2])
    assert training["strategy"] == "SPOT" and training["attempts"][-1]["location"] == WEST
    assert training["hedging"]["cancelled"] == 2
    # every member carries its own submission key
    keys = {j["labels"]["gpu-sched-submission"] for j in jobs.values()}
    assert len(keys) == 3


def test_when_every_member_ends_on_a_capacity_outcome_the_plan_moves_on(airflow):
    from airflow.sdk import DAG

    for region in (LOCATION, EAST):
        airflow.set_capacity(region, "NVIDIA_TESLA_A100", flex_start=0, spot=0)
    with DAG("race_spent", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START", "max_wait_duration": "60s"},
                             {"strategy": "SPOT", "locations": [EAST], "capacity_wait_timeout": 0.5}]},
                   {"strategy": "STANDARD"}])
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    assert training["strategy"] == "STANDARD"
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1, "STANDARD": 1}
    states = [(a["strategy"], a["state"], a.get("race")) for a in training["attempts"]]
    assert states[:2] == [("FLEX_START", "JOB_STATE_FAILED", "no_winner"),
                          ("SPOT", "CAPACITY_TIMEOUT", "no_winner")]
    assert states[2][:2] == ("STANDARD", "JOB_STATE_SUCCEEDED")


def test_a_worker_killed_between_two_creates_re_attaches_and_creates_only_the_missing_member(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator, race

    real = race.submit_member

    def dies_after_the_first_create(op, context, ledger, entry):
        name = real(op, context, ledger, entry)
        if context["ti"].try_number == 1 and entry.index == 0:
            raise SystemExit("worker killed")
        return name

    class Killed(GpuTrainingOperator):
        pass

    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG("race_killed", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START"}, {"strategy": "SPOT", "locations": [EAST]}]}], cls=Killed,
                  retries=1, retry_delay=timedelta(0))
    race.submit_member = dies_after_the_first_create
    try:
        result = run_dag(dag, logical_date=START)
    finally:
        race.submit_member = real
    assert result.state == "success" and result["train"].try_number == 2
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1}  # no duplicate of member 0
    jobs = _every_job(airflow)
    assert sorted(j["state"] for j in jobs) == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"]
    flex = next(j for j in jobs if j["jobSpec"]["scheduling"]["strategy"] == "FLEX_START")
    assert flex["labels"]["airflow-try"] == "1" and flex["state"] == "JOB_STATE_CANCELLED"


def test_a_worker_killed_after_saving_a_key_but_before_its_name_finds_the_job_by_label(airflow):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import race

    real_save = race.submit_member

    def dies_before_the_name_is_saved(op, context, ledger, entry):
        if context["ti"].try_number == 1 and entry.index == 1:
            saved = ledger.save
            ledger.save = lambda: (_ for _ in ()).throw(SystemExit("worker killed")) \
                if ledger.data["race"]["members"][-1].get("job_name") else saved()
        return real_save(op, context, ledger, entry)

    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    with DAG("race_killed_key", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START"}, {"strategy": "SPOT", "locations": [EAST]}]}],
                  retries=1, retry_delay=timedelta(0))
    race.submit_member = dies_before_the_name_is_saved
    try:
        result = run_dag(dag, logical_date=START)
    finally:
        race.submit_member = real_save
    assert result.state == "success" and result["train"].try_number == 2
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1}  # the SPOT member was found by its key
    assert result["train"].return_value["strategy"] == "SPOT"


def test_a_race_an_earlier_try_made_that_is_cancelled_after_this_try_re_attached_races_anew(airflow):
    """A cleared race task: try 2 re-attaches to try 1's members while they still queue, then
    try 1's on_kill cancels them. Try 2 must race anew (two new members), not read the cancels as
    the members' capacity outcome and fail (CI, stop 27: tests/e2e/test_races.py)."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import race

    real = race.wait_for_race
    cancelled: list[str] = []

    def killed_then_cancelled(op, context, action):
        names = [w.job_name for w in action.members]
        if context["ti"].try_number == 1:
            raise SystemExit("worker killed")  # try 1 ends with both members queued
        if not cancelled:  # try 2 re-attached: try 1's on_kill lands once its trigger saw them queued
            cancelled.extend(names)
            airflow.start_traffic()
            threading.Thread(target=cancel_once_seen_queued, args=(names,), daemon=True).start()
        return real(op, context, action)

    def cancel_once_seen_queued(names):
        deadline = time.monotonic() + 60
        while not all(any(x["method"] == "GET" and name in (x["responseBody"] or "") and "JOB_STATE_QUEUED" in
                          (x["responseBody"] or "") for x in airflow.traffic()) for name in names):
            if time.monotonic() > deadline:
                return  # the test then fails on its job count
            time.sleep(0.05)
        for name in names:
            requests.post(f"{airflow.url}/v1/{name}:cancel", json={}, timeout=10).raise_for_status()
        airflow.set_capacity(EAST, "NVIDIA_TESLA_A100", spot=8)  # the new race's SPOT member runs

    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    airflow.set_capacity(EAST, "NVIDIA_TESLA_A100", spot=0)
    with DAG("race_cleared_late_cancel", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START"}, {"strategy": "SPOT", "locations": [EAST]}]}],
                  retries=1, retry_delay=timedelta(0))
    race.wait_for_race = killed_then_cancelled
    try:
        result = run_dag(dag, logical_date=START)
    finally:
        race.wait_for_race = real
    assert result.state == "success" and result["train"].try_number == 2
    jobs = _every_job(airflow)
    first = [j for j in jobs if j["name"] in cancelled]
    new = [j for j in jobs if j["name"] not in cancelled]
    assert len(cancelled) == 2 and {j["state"] for j in first} == {"JOB_STATE_CANCELLED"}
    assert sorted(j["state"] for j in new) == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"], new
    assert {j["labels"]["airflow-try"] for j in new} == {"2"}
    assert len({j["labels"]["gpu-sched-submission"] for j in jobs}) == 4  # each member under its own key


@pytest.mark.parametrize("outcome", ["cancelled", "succeeded", "failed"])
def test_two_members_running_in_one_poll_keep_one_by_the_earlier_start_then_member_order(airflow, outcome):
    """Under each way a cancel of a RUNNING job may end (cancelOutcome): the loser stays the loser
    (a loser that completed or failed despite its cancel neither wins nor fails the task), and the
    GPU time it ran until the cancel is the hedging cost."""
    from airflow.sdk import DAG

    # one region, no GPUs for either strategy until emulated second 100, when both get theirs at
    # the same instant: the region's one list call (the shared poller) shows both RUNNING, started
    # at the same time; the tie goes to the member order
    airflow.reset({**FAST, "provisioningSeconds": 0, "queueSeconds": 0, "variants": {"cancelOutcome": outcome}})
    outcome = FORCED_VARIANTS.get("cancelOutcome", outcome)
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0, spot=0)

    def gpus_for_both_once_both_wait():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = _jobs(airflow, LOCATION)
            if len(jobs) == 2 and all(j["state"] == "JOB_STATE_QUEUED" for j in jobs):
                airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=8, spot=8)  # one admission
                return
            time.sleep(0.02)

    with DAG("race_tie", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "SPOT"}, {"strategy": "FLEX_START"}]}], deferrable=False,
                  poll_interval=0.5, env={"EMULATOR_RUN_SECONDS": "500"})
    helper = threading.Thread(target=gpus_for_both_once_both_wait, daemon=True)
    helper.start()
    result = run_dag(dag, logical_date=START)
    helper.join()
    assert result.state == "success", result.tasks
    jobs = {j["name"]: j for j in _every_job(airflow)}
    training = result["train"].return_value
    kept = jobs[training["job_name"]]
    other = next(j for j in jobs.values() if j is not kept)
    assert len(jobs) == 2 and kept["state"] == "JOB_STATE_SUCCEEDED"
    # the loser was RUNNING when cancelled: it ends as the scenario's cancelOutcome says
    assert other["state"] == f"JOB_STATE_{outcome.upper()}"
    assert kept["jobSpec"]["scheduling"]["strategy"] == "SPOT"  # member 0
    loser = training["attempts"][0]
    # a tie: both were seen RUNNING (in one poll), so the member order decided, not a startTime
    assert loser["running_since"] is not None and training["attempts"][-1]["running_since"] is not None
    assert loser["race"] == "lost" and loser["run_seconds"] > 0 and loser["gpu_hours"] > 0  # it ran until cancelled
    assert training["hedging"]["gpu_hours"] == loser["gpu_hours"] and training["hedging"]["cancelled"] == 1
    assert loser["job_name"] == other["name"] and loser["state"] == other["state"]


def test_a_race_is_checked_before_any_gpu_is_requested():
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    cases = {
        "plan[0].race: must be a list of at least 2 steps": [{"race": [{"strategy": "SPOT"}]}],
        "plan[0].race[1]: a race member is a plain step": [{"race": [{"strategy": "SPOT"}, {"race": []}]}],
        "plan[0].race[0].locations: a race member runs in one region":
            [{"race": [{"strategy": "SPOT", "locations": [LOCATION, EAST]}, {"strategy": "FLEX_START"}]}],
        "plan[0].race[0].strategy: a race member is one of FLEX_START, SPOT, STANDARD":
            [{"race": [{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "p"}, {"strategy": "SPOT"}]}],
        "plan[0].race[1].max_preemption_retries": [{"race": [{"strategy": "SPOT"},
                                                             {"strategy": "SPOT", "max_preemption_retries": -1}]}],
        "plan[0].locations: is not a key of a race step":
            [{"race": [{"strategy": "SPOT"}, {"strategy": "SPOT"}], "locations": [EAST]}],
    }
    for expected, plan in cases.items():
        with pytest.raises(InvalidTrainingSpec) as info:
            _operator(plan)
        assert expected in str(info.value), (expected, str(info.value))


# ---------------------------------------------------------------------------- the race trigger


def _body(strategy: str, run_seconds: int = 30) -> dict:
    from tests.test_triggers import _job

    return _job(strategy, run_seconds)


def _create_in(emulator, location: str, body: dict) -> str:
    from airflow_gpu_sched.vertex.client import VertexClient

    with VertexClient(location=location, project=PROJECT, api_endpoint=emulator.url) as client:
        return client.create_custom_job(body).name


def _state(emulator, name: str) -> str:
    return requests.get(f"{emulator.url}/v1/{name}", timeout=5).json()["state"]


def test_the_race_trigger_serializes_to_plain_json_and_round_trips():
    import importlib

    from airflow_gpu_sched.triggers import RaceTrigger

    trigger = RaceTrigger(["projects/p/locations/a/customJobs/1", "projects/p/locations/b/customJobs/2"], [0, 2],
                          "my_conn", 5.0, 60.0, running_by=[1.5e9, None], bound_reasons=["why", None])
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    import json

    assert json.loads(json.dumps(kwargs)) == kwargs


async def test_a_triggerer_restart_keeps_watching_every_member_and_cancels_nothing(vertex_conn):
    """The first triggerer dies while both members queue; the one started from the serialized
    trigger sees member 1 get its GPUs, keeps it and cancels member 0."""
    from tests.test_triggers import _first

    from airflow_gpu_sched.triggers import RaceTrigger

    emulator = vertex_conn
    emulator.reset({**FAST, "provisioningSeconds": 0})
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0, spot=0)
    emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", flex_start=0, spot=0)
    names = [_create_in(emulator, LOCATION, _body("FLEX_START")), _create_in(emulator, EAST, _body("SPOT", 3000))]
    first = RaceTrigger(names, poll_interval=0.05)
    with pytest.raises(asyncio.TimeoutError):  # the triggerer stops (cleanup, not on_kill)
        await _first(first, timeout=0.5)
    assert [_state(emulator, n) for n in names] == ["JOB_STATE_QUEUED"] * 2  # a restart cancels nothing
    path, kwargs = first.serialize()
    restarted = RaceTrigger(**kwargs)
    emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", spot=8)
    event = await _first(restarted)
    assert event["status"] == "race_won" and event["winner"] == 1
    assert [m["job_name"] for m in event["members"]] == names
    assert event["members"][0]["by_race"] and event["members"][0]["event"]["status"] == "cancelled"
    assert [_state(emulator, n) for n in names] == ["JOB_STATE_CANCELLED", "JOB_STATE_RUNNING"]


async def test_a_killed_or_cleared_task_cancels_every_member(vertex_conn):
    from airflow_gpu_sched.triggers import RaceTrigger

    emulator = vertex_conn
    emulator.reset(FAST)
    emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", flex_start=0)
    names = [_create_in(emulator, LOCATION, _body("SPOT", 3000)), _create_in(emulator, EAST, _body("FLEX_START"))]
    await RaceTrigger(names, poll_interval=0.05).on_kill()
    assert emulator.stats()["cancels"] == 2
    # a member already RUNNING may end as the scenario's cancelOutcome says (it cannot finish its
    # 3000 s on its own here)
    assert {_state(emulator, n) for n in names} <= {"JOB_STATE_CANCELLING", *CANCEL_OF_A_RUNNING_JOB_ENDS}


async def test_a_member_past_its_bound_is_cancelled_and_when_all_are_the_race_ends_on_capacity(vertex_conn):
    from tests.test_triggers import _first

    from airflow_gpu_sched.triggers import RaceTrigger

    emulator = vertex_conn
    emulator.reset(FAST)
    emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", spot=0)
    emulator.set_capacity(EAST, "NVIDIA_TESLA_A100", spot=0)
    names = [_create_in(emulator, LOCATION, _body("SPOT")), _create_in(emulator, EAST, _body("SPOT"))]
    soon = time.time() + 0.3
    event = await _first(RaceTrigger(names, poll_interval=0.05, running_by=[soon, soon],
                                     bound_reasons=["capacity_wait_timeout=0.3s of SPOT"] * 2))
    assert event["status"] == "race_ended" and event["winner"] is None
    assert [m["event"]["status"] for m in event["members"]] == ["capacity_timeout"] * 2
    assert all(m["event"]["running_bound"] == "capacity_wait_timeout=0.3s of SPOT" for m in event["members"])


def test_an_ambiguous_create_of_a_member_is_reconciled_by_its_key_and_the_retry_creates_only_the_rest(airflow):
    """Sync mode, one task state store across two tries: every request of the first answers 503
    after the service carried it out (a lost response), so the first member's create is
    ambiguous and its lookup fails too; the next try finds it by its key's label."""
    from airflow_gpu_sched.orchestration.errors import VertexUnreachable
    from tests.test_operators import Store, context

    plan = [{"race": [{"strategy": "FLEX_START"}, {"strategy": "SPOT", "locations": [EAST]}]}]
    airflow.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    store = Store()
    airflow.set_faults(error_rate=1.0, status_codes=[503], after_handler_rate=1.0)
    with pytest.raises(VertexUnreachable):
        _operator(plan, deferrable=False, transient_error_window=0.5, quota_preflight=False).execute(context(store))
    airflow.clear_faults()
    result = _operator(plan, deferrable=False, quota_preflight=False).execute(context(store))
    assert airflow.stats()["jobsCreated"] == {"FLEX_START": 1, "SPOT": 1}
    assert result["strategy"] == "SPOT" and [a["race"] for a in result["attempts"]] == ["lost", "won"]


def test_a_member_our_bound_cancelled_that_succeeded_all_the_same_may_win():
    """A cancel is best effort (cancelOutcome): a member cancelled for its bound that got its VMs as
    the cancel went out and completed did train; its output is used, as a single job's would be.
    One that ended CANCELLED (or FAILED by the cancel) never wins."""
    from airflow_gpu_sched.orchestration.race_engine import race_verdict
    from airflow_gpu_sched.orchestration.watch import JobWatch
    from airflow_gpu_sched.triggers import RaceTrigger
    from airflow_gpu_sched.vertex.models import CustomJob

    names = [f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{n}" for n in (1, 2)]
    trigger = RaceTrigger(names, poll_interval=0.05)
    watches = [JobWatch(name, 60) for name in names]
    waiting = CustomJob(name=names[1], state="JOB_STATE_QUEUED")
    for state, wins in [("JOB_STATE_SUCCEEDED", 0), ("JOB_STATE_CANCELLED", None), ("JOB_STATE_FAILED", None)]:
        seen = [CustomJob(name=names[0], state=state), waiting]
        assert race_verdict(trigger.members_seen(seen, {0: "bound"}, watches), {0: "bound"})[0] == wins, state


@pytest.fixture
def statsd(monkeypatch, airflow_db):
    """Airflow's StatsD client (influx tags) sending to a loopback socket, as test_observe_metrics'."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    from tests.test_observe_metrics import StatsdSocket

    server = StatsdSocket()
    for name, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(server.port),
                        "STATSD_INFLUXDB_ENABLED": "True"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{name}", value)
    stats.initialize(factory=get_stats_factory(), export_legacy_names=True)
    yield server
    stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
    server.sock.close()


def test_race_members_reach_the_metrics_and_the_region_history_as_single_jobs_do(airflow, statsd):
    """Each member's attempt closes as a single job's does: its capacity wait (and GPU-hours, cost)
    in ``gpu_sched.*`` metrics, its stockout in the observed-region history."""
    from airflow.sdk import DAG

    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    from airflow_gpu_sched.orchestration import observed
    from tests.test_region_order import stored_history

    def clean():
        with create_session() as session:
            session.execute(delete(Variable).where(Variable.key.startswith(observed.VARIABLE)))

    clean()
    for region in (LOCATION, EAST):
        airflow.set_capacity(region, "NVIDIA_TESLA_A100", flex_start=0, spot=0)
    prices = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 2.0, "SPOT": 1.0, "STANDARD": 3.0}}
    with DAG("race_observed", schedule=None, start_date=START) as dag:
        _operator([{"race": [{"strategy": "FLEX_START", "max_wait_duration": "60s"},
                             {"strategy": "SPOT", "locations": [EAST], "capacity_wait_timeout": 0.5}]},
                   {"strategy": "STANDARD", "locations": [WEST], "region_order": "observed"}], prices=prices)
    try:
        result = run_dag(dag, logical_date=START)
        history = stored_history()
    finally:
        clean()
    assert result.state == "success", result.tasks
    training = result["train"].return_value
    assert [(a["strategy"], a["location"], a.get("race")) for a in training["attempts"]] == [
        ("FLEX_START", LOCATION, "no_winner"), ("SPOT", EAST, "no_winner"), ("STANDARD", WEST, None)]

    sent = statsd.packets()
    packets = [p for p in sent if p[0] == "airflow.gpu_sched.capacity_wait"]
    assert [(t["strategy"], t["region"]) for _, t, _, _ in packets] == [
        (a["strategy"], a["location"]) for a in training["attempts"]]
    assert [v for _, _, v, _ in packets] == [pytest.approx(a["queued_seconds"] * 1000, abs=1)
                                             for a in training["attempts"]]
    hours = [v for n, _, v, _ in sent if n == "airflow.gpu_sched.gpu_hours"]
    assert sum(hours) == pytest.approx(training["gpu_hours"], abs=1e-4)

    # both members stocked out: the history says so for their regions; the STANDARD job ran in WEST
    assert [(e["region"], e["strategy"], e["stockout"]) for e in history] == [
        (LOCATION, "FLEX_START", True), (EAST, "SPOT", True), (WEST, "STANDARD", False)]
