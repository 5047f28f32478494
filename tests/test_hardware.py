"""Hardware alternatives inside a plan (issue 43): a step tries 8 x H100, then 2 x 4 A100, each
bounded by its capacity_wait_timeout; the job's pools are rewritten for each, the training script
reads the hardware it got, and plan check names an alternative's field and the rule it breaks."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone

import pytest
import requests

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.operators import GpuTrainingOperator
from airflow_gpu_sched.orchestration.budget import Budget, estimate
from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
from airflow_gpu_sched.orchestration.hardware import ENV_JSON, Hardware, given_index, rewrite_pools
from airflow_gpu_sched.orchestration.plans import parse_plan
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
H100 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
A100_2X4 = {"machine_type": "a2-highgpu-4g", "accelerator_type": "NVIDIA_TESLA_A100", "accelerator_count": 4,
            "replica_count": 2}
L4 = {"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1}
T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1}
COMMON = dict(project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1", machine_type="a2-highgpu-1g",
              accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
# the training script's side: what it reads to set its batch size (docs/plans.md, "Hardware alternatives")
SCRIPT = ("import json, os; hw = json.loads(os.environ['GPU_SCHED_HARDWARE']); "
          "print('hardware', json.dumps(hw, sort_keys=True)); "
          "print('per machine', os.environ['GPU_SCHED_ACCELERATOR_COUNT'], os.environ['GPU_SCHED_ACCELERATOR_TYPE'])")


@pytest.fixture
def executing(tmp_path, monkeypatch):
    """An emulator that runs each job's command as a local process, the task's connection on it."""
    with EmulatorServer(Scenario(seed=1, speed=1, execute=True, execute_root=str(tmp_path))) as server:
        control = EmulatorControl(server.url)
        control.reset({"seed": 1, "speed": 10, "queueSeconds": 0, "provisioningSeconds": 0})
        monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": server.url}}))
        yield control
        control.reset({})  # stops the processes


def _jobs(emulator) -> list[dict]:
    body = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5).json()
    return list(reversed(body.get("customJobs", [])))  # oldest first


def test_no_h100_anywhere_the_step_cancels_it_at_its_bound_and_trains_on_2x4_a100(airflow_db, executing, tmp_path):
    from airflow.sdk import DAG

    executing.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=0, spot=0, standard=0)
    prices = {"currency": "USD", "NVIDIA_H100_80GB": {"FLEX_START": 5.0}, "NVIDIA_TESLA_A100": {"FLEX_START": 2.0}}
    with DAG("hardware_alternatives", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", poll_interval=0.02, prices=prices, command=[sys.executable, "-c", SCRIPT],
                            plan=[{"strategy": "FLEX_START", "capacity_wait_timeout": "2s", "hardware": [H100, A100_2X4]}],
                            **{**COMMON, "image_uri": "local"})

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    assert [(a["strategy"], a["state"], a["accelerator_type"]) for a in training["attempts"]] == [
        ("FLEX_START", "CAPACITY_TIMEOUT", "NVIDIA_H100_80GB"), ("FLEX_START", "JOB_STATE_SUCCEEDED", "NVIDIA_TESLA_A100")]
    assert "capacity_wait_timeout=2s" in training["attempts"][0]["error"]
    got = {**A100_2X4}
    assert training["hardware"] == got and training["attempts"][1]["hardware"] == got
    assert training["attempts"][0]["hardware"] == {**H100, "replica_count": 1}
    # GPU-hours and cost per accelerator: 8 A100s held for the run, at the A100's price
    won = training["attempts"][1]
    assert won["cost"] == pytest.approx(round(won["gpu_hours"] * 2.0, 4))
    assert won["gpu_hours"] == pytest.approx(round(8 * won["run_seconds"] / 3600, 4), abs=1e-4)

    h100_job, a100_job = _jobs(executing)
    assert h100_job["state"] == "JOB_STATE_CANCELLED"  # cancelled at its bound: no orphan left queuing
    pools = a100_job["jobSpec"]["workerPoolSpecs"]
    assert [(p["machineSpec"]["machineType"], p["machineSpec"]["acceleratorCount"], p["replicaCount"]) for p in pools] \
        == [("a2-highgpu-4g", 4, "1"), ("a2-highgpu-4g", 4, "1")]  # the same configuration in every pool
    # the training script saw the hardware it got
    log = (tmp_path / "logs" / f"{a100_job['name'].rsplit('/', 1)[-1]}-1.log").read_text()
    assert f"hardware {json.dumps(A100_2X4, sort_keys=True)}" in log
    assert "per machine 4 NVIDIA_TESLA_A100" in log


@pytest.mark.parametrize("plan, hardware, field, words", [
    ([{"strategy": "FLEX_START", "hardware": [H100, T4]}], None, "plan[0].hardware[1].accelerator_type",
     "FLEX_START (Dynamic Workload Scheduler) needs GPUs of type"),
    ([{"strategy": "FLEX_START"}, {"strategy": "SPOT", "hardware": [L4]}], None, "plan[1].hardware[0].machine_type",
     "SPOT training runs on the A2 and A3 machine series only"),
    ([{"strategy": "STANDARD", "hardware": [{**H100, "accelerator_count": 4}]}], None,
     "plan[0].hardware[0].accelerator_count", "takes NVIDIA_H100_80GB in counts of [8] (got 4)"),
    ([{"strategy": "STANDARD", "hardware": [{"accelerator_type": "NVIDIA_L4", "accelerator_count": 1, "gpus": 2}]}],
     None, "plan[0].hardware[0].gpus", "is not a field of a hardware alternative"),
    ([{"strategy": "STANDARD", "hardware": [{"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4"}]}],
     None, "plan[0].hardware[0].accelerator_type", "together, or neither"),
    ([{"strategy": "STANDARD", "hardware": [{**L4, "replica_count": 0}]}], None, "plan[0].hardware[0].replica_count",
     "whole number >= 1"),
    ([{"strategy": "STANDARD", "hardware": []}], None, "plan[0].hardware", "non-empty list"),
    ([{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "pool-a", "hardware": [L4]}], None,
     "plan[0].hardware", "runs on its resource's machines"),
    ([{"race": [{"strategy": "SPOT", "hardware": [H100, A100_2X4]}, {"strategy": "STANDARD"}]}], None,
     "plan[0].race[0].hardware", "list one member per alternative"),
    ([{"strategy": "FLEX_START"}, {"strategy": "SPOT"}], [H100, L4], "hardware[1].machine_type",
     "plan[1] SPOT: SPOT training runs on the A2 and A3"),  # the operator's, for every step
], ids=["flex-start-t4", "spot-on-g2", "count", "unknown-field", "type-without-count", "replicas", "empty",
        "persistent", "race-member", "operator-wide"])
def test_plan_check_names_the_alternatives_field_and_the_rule(plan, hardware, field, words):
    with pytest.raises(InvalidTrainingSpec) as raised:
        GpuTrainingOperator(task_id="t", plan=plan, hardware=hardware, **COMMON)
    assert f"{field}: " in str(raised.value) and words in str(raised.value)


def test_the_cli_plan_check_shows_each_alternative_and_names_the_field(airflow_db, tmp_path, capsys):
    from airflow_gpu_sched.tools.cli import main

    dag = f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow_gpu_sched.operators import GpuTrainingOperator

with DAG("hw", schedule=None, start_date=datetime(2026, 1, 1)):
    GpuTrainingOperator(task_id="train", project_id="{PROJECT}", location="us-central1", image_uri="gcr.io/p/t:1",
                        machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
                        plan=[{{"strategy": "FLEX_START", "hardware": {[H100, A100_2X4]!r}}}, {{"strategy": "SPOT"}}])
"""
    path = tmp_path / "hw.py"
    path.write_text(dag)
    capsys.readouterr()
    assert main(["plan", "check", str(path), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["position"], r["step"].split(" on ")[-1], r["violations"]) for r in rows] == [
        (0, "a3-highgpu-8g (8 x NVIDIA_H100_80GB)", []), (1, "2 x a2-highgpu-4g (4 x NVIDIA_TESLA_A100)", []),
        (2, "SPOT(max_preemption_retries=3)", [])]

    path.write_text(dag.replace("'accelerator_count': 4", "'accelerator_count': 3"))
    assert main(["plan", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "plan[0].hardware[1].accelerator_count: plan[0] FLEX_START: 'a2-highgpu-4g' takes NVIDIA_TESLA_A100" in err


def test_the_cli_quota_check_reads_each_alternatives_accelerator(airflow_db, fast_emulator, tmp_path, capsys):
    from airflow_gpu_sched.tools.cli import main

    fast_emulator.set_quota_limit("custom_model_training_preemptible_nvidia_h100_gpus", 4, region=LOCATION)
    path = tmp_path / "hw.py"
    path.write_text(f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow_gpu_sched.operators import GpuTrainingOperator

with DAG("hwq", schedule=None, start_date=datetime(2026, 1, 1)):
    GpuTrainingOperator(task_id="train", project_id="{PROJECT}", location="{LOCATION}", image_uri="gcr.io/p/t:1",
                        machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
                        plan=[{{"strategy": "SPOT", "hardware": {[H100, A100_2X4]!r}}}])
""")
    capsys.readouterr()
    assert main(["quota", "check", str(path), "-o", "json"]) == 1  # the H100 alternative's quota is too low
    rows = json.loads(capsys.readouterr().out)
    assert [(r["metric"].rsplit("_", 2)[-2], r["need"], r["verdict"].split(":")[0]) for r in rows] == [
        ("h100", 8, "TOO LOW"), ("a100", 8, "ok")]
    assert rows[0]["step"] == "SPOT on a3-highgpu-8g (8 x NVIDIA_H100_80GB)"


def test_a_step_of_n_alternatives_is_n_positions_in_order_each_with_its_regions():
    steps = parse_plan([{"strategy": "SPOT", "locations": ["us-central1", "us-east4"], "hardware": [H100, A100_2X4]},
                        {"strategy": "STANDARD"}])
    assert [(s.strategy, s.hardware[0].accelerator_type if s.hardware else None, s.locations) for s in steps] == [
        ("SPOT", "NVIDIA_H100_80GB", ("us-central1", "us-east4")),
        ("SPOT", "NVIDIA_TESLA_A100", ("us-central1", "us-east4")), ("STANDARD", None, ())]
    assert [given_index(steps, i) for i in range(3)] == [0, 0, 1]  # errors name the plan as it was given


def test_the_pools_are_rewritten_consistently_and_carry_the_env():
    chief = {"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                             "acceleratorCount": 1, "reservationAffinity": {"reservationAffinityType": "ANY"}},
             "replicaCount": 1, "containerSpec": {"imageUri": "i", "env": [{"name": "A", "value": "1"}]}}
    workers = {**chief, "replicaCount": 3}
    on_h100 = rewrite_pools([chief, workers], Hardware(**H100))  # replicas as the job's: 1 + 3
    assert [p["replicaCount"] for p in on_h100] == [1, 3]
    assert all(p["machineSpec"] == {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB",
                                    "acceleratorCount": 8, "reservationAffinity": {"reservationAffinityType": "ANY"}}
               for p in on_h100)
    env = {e["name"]: e["value"] for e in on_h100[1]["containerSpec"]["env"]}
    assert env["A"] == "1" and json.loads(env[ENV_JSON])["replica_count"] == 4
    alone = rewrite_pools([chief, workers], Hardware(**{**H100, "replica_count": 1}))
    assert len(alone) == 1  # one machine: the workers' pool goes
    assert [p["replicaCount"] for p in rewrite_pools([chief], Hardware(**A100_2X4))] == [1, 1]


def test_prices_are_per_accelerator_of_the_alternative():
    steps = parse_plan([{"strategy": "FLEX_START", "hardware": [H100, A100_2X4]}])
    prices = {"currency": "USD", "NVIDIA_H100_80GB": {"FLEX_START": 5.0}, "NVIDIA_TESLA_A100": {"FLEX_START": 2.0}}
    budget = Budget(remaining=None, prices=prices, demand=(("NVIDIA_H100_80GB", 8),), expected_run_time=timedelta(hours=2),
                    hardware_demand=((steps[0].hardware[0], (("NVIDIA_H100_80GB", 8),)),
                                     (steps[1].hardware[0], (("NVIDIA_TESLA_A100", 8),))))
    assert [(estimate(budget, s, LOCATION).price, estimate(budget, s, LOCATION).cost) for s in steps] == [
        (5.0, 80.0), (2.0, 32.0)]


# ---------------------------------------------------------------------------- hardware_order: as regions are


def test_the_second_night_tries_first_the_hardware_that_came_on_the_first(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    from tests.test_region_order import stored_history

    _clean_history()
    # no on-demand H100 here: a STANDARD job for them fails for resources after 20 s
    fast_emulator.reset({**_fast(), "capacity": [{"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB",
                                                  "standard": 0, "standardStockoutSeconds": 20}]})
    with DAG("observed_hardware", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", poll_interval=0.02, plan=[
            {"strategy": "STANDARD", "hardware": [H100, A100_2X4], "hardware_order": "observed"}], **COMMON)
    try:
        first = run_dag(dag, logical_date=START)
        assert [a["accelerator_type"] for a in first["train"].return_value["attempts"]] == [
            "NVIDIA_H100_80GB", "NVIDIA_TESLA_A100"]  # nothing known: as given
        assert [(e["accelerator"], e["stockout"]) for e in stored_history()] == [
            ("NVIDIA_H100_80GB", True), ("NVIDIA_TESLA_A100", False)]
        second = run_dag(dag, logical_date=START + timedelta(days=1))
        assert second.state == "success"
        assert [a["accelerator_type"] for a in second["train"].return_value["attempts"]] == ["NVIDIA_TESLA_A100"]
        from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY

        assert second.task_state_store["train"][LEDGER_KEY]["hardware_orders"] == {"0": [1, 0]}
    finally:
        _clean_history()


def _fast() -> dict:
    from tests.conftest import FAST

    return FAST


def _clean_history() -> None:
    from sqlalchemy import delete

    from airflow.models import Variable
    from airflow.utils.session import create_session
    from airflow_gpu_sched.orchestration import observed

    with create_session() as session:
        session.execute(delete(Variable).where(Variable.key.startswith(observed.VARIABLE)))


def test_cheapest_ranks_alternatives_by_expected_cost_once_observed():
    from airflow_gpu_sched.orchestration.hardware_order import rank

    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    labels, accelerators = ("8 x H100", "2 x 4 A100"), ("NVIDIA_H100_80GB", "NVIDIA_TESLA_A100")
    prices = {"8 x H100": 40.0, "2 x 4 A100": 16.0}  # the job's price per hour on each
    assert rank(labels, accelerators, "cheapest", LOCATION, [], now, "SPOT", prices)[0] == (0, 1)  # nothing observed
    seen = [{"region": LOCATION, "accelerator": a, "at": (now - timedelta(hours=1)).isoformat(), "strategy": "SPOT",
             "stockout": False, "to_running": 60.0, "preemptions": 0} for a in accelerators]
    assert rank(labels, accelerators, "cheapest", LOCATION, seen, now, "SPOT", prices)[0] == (1, 0)
    stockout = [{**seen[1], "stockout": True, "waited": 3600.0}]
    assert rank(labels, accelerators, "observed", LOCATION, [seen[0], *stockout], now)[0] == (0, 1)


def test_a_reordered_group_still_names_the_plan_as_given():
    from airflow_gpu_sched.orchestration.hardware import reorder

    steps = parse_plan([{"strategy": "FLEX_START"}, {"strategy": "SPOT"}], hardware=[H100, A100_2X4])
    swapped = reorder(steps, {"0": [1, 0], "1": [1, 0]})
    assert [(s.strategy, s.hardware[0].accelerator_type) for s in swapped] == [
        ("FLEX_START", "NVIDIA_TESLA_A100"), ("FLEX_START", "NVIDIA_H100_80GB"),
        ("SPOT", "NVIDIA_TESLA_A100"), ("SPOT", "NVIDIA_H100_80GB")]
    assert [given_index(swapped, i) for i in range(4)] == [0, 0, 1, 1]
    assert reorder(swapped, {"0": [1, 0], "1": [1, 0]}) == swapped  # applied again (a resumed try): the same


# ---------------------------------------------------------------------------- per accelerator, raced


def test_the_quota_preflight_reads_each_alternatives_accelerator(fast_emulator):
    from tests.test_operators import context

    fast_emulator.set_quota_limit("custom_model_training_preemptible_nvidia_h100_gpus", 4, region=LOCATION)
    op = GpuTrainingOperator(task_id="t", deferrable=False, poll_interval=0.02, plan=[
        {"strategy": "SPOT", "hardware": [H100, A100_2X4]}], **COMMON)
    result = op.execute(context())
    assert [(a["accelerator_type"], a["state"]) for a in result["attempts"]] == [
        ("NVIDIA_H100_80GB", "QUOTA_TOO_LOW"), ("NVIDIA_TESLA_A100", "JOB_STATE_SUCCEEDED")]
    assert result["attempts"][0]["hardware"] == {**H100, "replica_count": None}  # no job: as the step asked
    assert "nvidia_h100_gpus" in result["attempts"][0]["error"]  # the H100's quota, not the job's own A100's
    assert fast_emulator.stats()["requests"]["customJobs.create"] == 1  # no H100 job was made


def test_alternatives_raced_one_member_each_the_one_that_gets_capacity_wins(fast_emulator):
    from tests.test_operators import context

    fast_emulator.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=0)
    op = GpuTrainingOperator(task_id="t", deferrable=False, poll_interval=0.02, plan=[
        {"race": [{"strategy": "FLEX_START", "hardware": [H100]}, {"strategy": "FLEX_START", "hardware": [A100_2X4]}]}],
        **COMMON)
    result = op.execute(context())
    assert result["state"] == "JOB_STATE_SUCCEEDED" and result["hardware"] == A100_2X4
    lost = [a for a in result["attempts"] if a.get("race") == "lost"]
    assert [a["accelerator_type"] for a in lost] == ["NVIDIA_H100_80GB"]


def test_plan_objective_cost_creates_the_job_on_the_cheaper_alternative_first(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
    from tests.test_cost_objective import seen, store

    _clean_history()
    now = datetime.now(timezone.utc)
    store([seen(LOCATION, 60.0, strategy="STANDARD", accelerator=a, now=now)  # both delivered lately
           for a in ("NVIDIA_H100_80GB", "NVIDIA_TESLA_A100")])
    prices = {"currency": "USD", "NVIDIA_H100_80GB": {"STANDARD": 5.0}, "NVIDIA_TESLA_A100": {"STANDARD": 2.0}}
    with DAG("cheapest_hardware", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(task_id="train", poll_interval=0.02, prices=prices, plan_objective="cost",
                            plan=[{"strategy": "STANDARD", "hardware": [H100, A100_2X4]}], **COMMON)
    try:
        result = run_dag(dag, logical_date=START)
        assert result.state == "success"
        assert [a["hardware"] for a in result["train"].return_value["attempts"]] == [A100_2X4]  # 16/h, not 40/h
        assert result.task_state_store["train"][LEDGER_KEY]["hardware_orders"] == {"0": [1, 0]}
        assert len(_jobs(fast_emulator)) == 1
    finally:
        _clean_history()
