"""Facts about running Airflow 3.3 DAGs in-process with dag.test() (see tests/airflow_harness.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

from tests import airflow_harness as h

if h._HOME_MARKER not in os.environ and "airflow" not in sys.modules:  # conftest did not set it up
    _home = h.set_airflow_env(tempfile.mkdtemp(prefix="airflow_home_"))
    atexit.register(shutil.rmtree, _home, ignore_errors=True)

from airflow.sdk import DAG, BaseHook, BaseOperator, task  # noqa: E402

from tests import harness_triggers  # noqa: E402
from tests.airflow_harness import airflow_db, run_dag, set_connection_env  # noqa: E402,F401

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class DeferOnce(BaseOperator):
    """Defers once on EchoTrigger; execute_complete reports what it can see."""

    def __init__(self, payload, conn_id=None, **kwargs):
        super().__init__(**kwargs)
        self.payload, self.conn_id = payload, conn_id

    def execute(self, context):
        context["task_state_store"].set("submitted", f"try-{context['ti'].try_number}")
        self.defer(
            trigger=harness_triggers.EchoTrigger(payload=self.payload, conn_id=self.conn_id),
            method_name="execute_complete",
        )

    def execute_complete(self, context, event):
        return {
            "event": event,
            "store": context["task_state_store"].get("submitted"),
            "try_number": context["ti"].try_number,
        }


def test_deferrable_operator_runs_trigger_inline(airflow_db):
    harness_triggers.CALLS.clear()
    with DAG("h_defer", schedule=None, start_date=START) as dag:
        DeferOnce(task_id="d", payload={"job": "j1"})
    result = run_dag(dag)
    assert result.state == "success"
    assert result["d"].state == "success"
    assert result["d"].try_number == 1  # resuming from deferral does not bump try_number
    out = result["d"].return_value
    assert out["event"] == {"payload": {"job": "j1"}}
    # (b) a value set before the deferral is visible in execute_complete
    assert out["store"] == "try-1"
    assert result.task_state_store["d"] == {"submitted": "try-1"}
    # (c) only run() happens: its generator is closed after the first event (finally runs),
    # but neither cleanup() nor on_kill() is called by dag.test()
    assert harness_triggers.CALLS == [("run", {"job": "j1"}), ("run_exit",)]


def test_task_state_store_survives_retry(airflow_db):
    seen = []

    with DAG("h_retry", schedule=None, start_date=START) as dag:

        @task(retries=1, retry_delay=timedelta(0))
        def flaky(task_state_store=None, ti=None):
            seen.append((ti.try_number, task_state_store.get("job_id")))
            if ti.try_number == 1:
                task_state_store.set("job_id", "job-1")
                raise RuntimeError("first try fails")
            return task_state_store.get("job_id")

        flaky()

    t0 = time.perf_counter()
    result = run_dag(dag, logical_date=START)
    elapsed = time.perf_counter() - t0
    assert result.state == "success"
    assert result["flaky"].try_number == 2
    assert result["flaky"].return_value == "job-1"
    assert seen == [(1, None), (2, "job-1")]  # retry ran inside the same dag.test(), store kept
    assert elapsed < 10  # retry_delay=0: the retry starts immediately (~0.1 s)
    assert result.task_state_store == {"flaky": {"job_id": "job-1"}}  # kept after success

    # A new dag.test() for the same logical date deletes the old run (and its store) first.
    seen.clear()
    again = run_dag(dag, logical_date=START)
    assert again.state == "success"
    assert seen == [(1, None), (2, "job-1")]
    # Even with the same run_id (same logical_date AND run_after) the store starts empty.
    seen.clear()
    run_after = START + timedelta(hours=1)
    first = run_dag(dag, logical_date=START, run_after=run_after)
    second = run_dag(dag, logical_date=START, run_after=run_after)
    assert first.run_id == second.run_id
    assert seen == [(1, None), (2, "job-1"), (1, None), (2, "job-1")]


def test_retries_exhausted_marks_failed(airflow_db):
    with DAG("h_fail", schedule=None, start_date=START) as dag:

        @task(retries=2, retry_delay=timedelta(0))
        def always_fails():
            raise ValueError("nope")

        always_fails()

    result = run_dag(dag)
    assert result.state == "failed"
    assert result["always_fails"].state == "failed"
    assert result["always_fails"].try_number == 3


def test_env_connections_visible_in_task_and_trigger(airflow_db, monkeypatch):
    set_connection_env(monkeypatch, "h_conn", "http", extra={"project": "p1"}, host="example.test", port=8443)
    seen = {}
    with DAG("h_conn", schedule=None, start_date=START) as dag:

        @task
        def read_conn():
            conn = BaseHook.get_connection("h_conn")
            seen.update(conn_type=conn.conn_type, host=conn.host, port=conn.port, extra=conn.extra_dejson)

        read_conn() >> DeferOnce(task_id="trig", payload=1, conn_id="h_conn")

    result = run_dag(dag)
    assert result.state == "success"
    assert seen == {"conn_type": "http", "host": "example.test", "port": 8443, "extra": {"project": "p1"}}
    assert result["trig"].return_value["event"]["conn"] == {"host": "example.test", "extra": {"project": "p1"}}


def test_xcom_push_and_return_value(airflow_db):
    with DAG("h_xcom", schedule=None, start_date=START) as dag:

        @task
        def produce(ti=None):
            ti.xcom_push(key="job_name", value="projects/p/jobs/1")
            return {"rows": 3, "tuple": (1, 2)}

        @task
        def consume(value, ti=None):
            return [value["rows"], ti.xcom_pull(task_ids="produce", key="job_name")]

        @task
        def square(x):
            return x * x

        consume(produce())
        square.expand(x=[1, 2, 3])

    result = run_dag(dag)
    assert result["produce"].xcoms == {"job_name": "projects/p/jobs/1", "return_value": {"rows": 3, "tuple": (1, 2)}}
    assert result["consume"].return_value == [3, "projects/p/jobs/1"]
    assert [result["square", i].return_value for i in range(3)] == [1, 4, 9]


def test_second_run_is_fast(airflow_db):
    with DAG("h_speed", schedule=None, start_date=START) as dag:

        @task
        def one():
            return 1

        one()

    t0 = time.perf_counter()
    run_dag(dag)
    t1 = time.perf_counter()
    result = run_dag(dag)
    t2 = time.perf_counter()
    print(f"run_dag: {t1 - t0:.2f}s then {t2 - t1:.2f}s")
    assert result["one"].return_value == 1
    assert t2 - t1 < 5  # measured ~0.2 s once the execution API is warm
