"""region_order="observed": the order as a pure function (a table), the bounded history, and two
nights through dag.test(): the first sees a stockout in one region and capacity in another, the
second tries the other first."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests

from airflow_gpu_sched.orchestration import observed
from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from airflow_gpu_sched.orchestration.plans import PlanError, parse_step
from tests.airflow_harness import run_dag
from tests.conftest import FAST, PROJECT

NOW = datetime(2026, 6, 1, 3, 0, tzinfo=timezone.utc)
A, B, C = "us-central1", "us-east4", "europe-west4"
H100 = "NVIDIA_H100_80GB"


def seen(region: str, to_running: float | None = None, *, waited: float = 0.0, preemptions: int = 0,
         days_ago: float = 1, accelerator: str = H100) -> dict:
    return {"region": region, "accelerator": accelerator, "at": (NOW - timedelta(days=days_ago)).isoformat(),
            "to_running": to_running, "waited": to_running if to_running is not None else waited,
            "stockout": to_running is None, "preemptions": preemptions, "strategy": "STANDARD"}


ORDERS = {
    "nothing observed: as given": ([], (A, B, C)),
    "a stockout sends a region back": ([seen(A, waited=600), seen(B, 120)], (B, C, A)),
    "faster capacity first": ([seen(A, 900), seen(B, 60), seen(C, 300)], (B, C, A)),
    "preemptions count": ([seen(A, 60, preemptions=3), seen(B, 600), seen(C, 3000)], (B, C, A)),
    "another accelerator says nothing": ([seen(A, waited=60, accelerator="NVIDIA_L4"), seen(B, 60)], (B, A, C)),
    "too old says nothing": ([seen(A, waited=60, days_ago=45), seen(B, 100)], (B, A, C)),
    "only the last nights count": ([seen(A, waited=60, days_ago=20)] + [seen(A, 30, days_ago=10 - i)
                                                                        for i in range(observed.PER_REGION)]
                                   + [seen(B, 100)], (A, B, C)),
    "a recovered region comes back": ([seen(A, waited=60, days_ago=3), seen(A, 30, days_ago=2),
                                       seen(A, 30, days_ago=1), seen(B, 5000)], (A, B, C)),
}


@pytest.mark.parametrize("history, expected", list(ORDERS.values()), ids=list(ORDERS))
def test_regions_are_ordered_by_what_was_observed(history, expected):
    ranked, inputs = observed.order((A, B, C), H100, history, NOW)
    assert ranked == expected
    assert [score.region for score in inputs] == list(expected)  # the inputs, in the same order
    assert all(str(score).startswith(score.region) for score in inputs)


def test_the_history_stays_bounded_in_age_and_count():
    old = [seen(A, 10, days_ago=40)]
    kept = observed.add(old, seen(B, 10, days_ago=0), NOW)
    assert [e["region"] for e in kept] == [B]
    many = [seen(A, float(i), days_ago=1) for i in range(observed.MAX_ENTRIES)]
    assert len(observed.add(many, seen(B, 1.0, days_ago=0), NOW)) == observed.MAX_ENTRIES


def test_an_attempt_record_as_an_observation():
    ran = {"location": A, "accelerator_type": H100, "strategy": "SPOT", "start_time": "x", "running_since": "y",
           "queued_seconds": 42.0, "outcome": "succeeded"}
    assert observed.observation(ran, 1, NOW) | {"at": None} == {
        "region": A, "accelerator": H100, "strategy": "SPOT", "at": None, "to_running": 42.0, "waited": 42.0,
        "stockout": False, "preemptions": 1}
    # a startTime alone (set at admission on real Vertex) is not "ran"
    assert observed.observation({**ran, "running_since": None, "outcome": "cancelled"}, 0, NOW) is None
    stockout = {**ran, "running_since": None, "outcome": "preempted"}
    assert observed.observation(stockout, 0, NOW)["stockout"] is True
    assert observed.observation({**stockout, "outcome": "failed"}, 0, NOW) is None  # user code: not capacity
    assert observed.observation({**ran, "location": None}, 0, NOW) is None


def test_region_order_is_checked_when_the_dag_is_parsed():
    assert parse_step({"strategy": "SPOT", "region_order": "observed", "locations": [A, B]}).region_order == "observed"
    with pytest.raises(PlanError, match=r"plan\[0\].region_order: must be one of given, observed"):
        parse_step({"strategy": "SPOT", "region_order": "fastest"})


def stored_history() -> list[dict]:
    """The history as stored in the metadata DB: every key under the prefix, merged."""
    from sqlalchemy import select

    from airflow.models import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        keys = list(session.scalars(select(Variable.key).where(Variable.key.startswith(observed.VARIABLE))))
    return observed.merge([Variable.get(key, deserialize_json=True) for key in keys], datetime.now(timezone.utc))


@pytest.fixture
def no_history(airflow_db):
    from sqlalchemy import delete

    from airflow.models import Variable
    from airflow.utils.session import create_session

    def clean():
        with create_session() as session:
            session.execute(delete(Variable).where(Variable.key.startswith(observed.VARIABLE)))

    clean()
    yield
    clean()


def test_the_second_night_starts_where_capacity_came_on_the_first(airflow_db, fast_emulator, no_history):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    # us-central1 has no on-demand A100s: a STANDARD job there fails for resources after 20 s
    fast_emulator.reset({**FAST, "capacity": [{"location": A, "acceleratorType": "NVIDIA_TESLA_A100",
                                               "standard": 0, "standardStockoutSeconds": 20}]})
    with DAG("observed_order", schedule=None, start_date=NOW) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=A, image_uri="gcr.io/p/t:1",
                            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
                            poll_interval=0.02, plan=[{"strategy": "STANDARD", "locations": [A, B],
                                                       "region_order": "observed"}])

    first = run_dag(dag, logical_date=NOW)
    assert first.state == "success"
    assert [a["location"] for a in first["train"].return_value["attempts"]] == [A, B]  # nothing known: as given
    history = stored_history()  # one key per observation since the history is merged on read
    assert [(e["region"], e["stockout"]) for e in history] == [(A, True), (B, False)]

    second = run_dag(dag, logical_date=NOW + timedelta(days=1))
    assert second.state == "success"
    assert [a["location"] for a in second["train"].return_value["attempts"]] == [B]  # B first, and it ran
    jobs_in = {region: len(requests.get(f"{fast_emulator.url}/v1/projects/{PROJECT}/locations/{region}/customJobs",
                                        timeout=5).json().get("customJobs", [])) for region in (A, B)}
    assert jobs_in == {A: 1, B: 2}  # the second night made no job in the region that stocked out
    assert second.task_state_store["train"][LEDGER_KEY]["region_orders"] == {"0": [B, A]}
