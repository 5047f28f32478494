"""The demo's progress and summary (issue 41): a line at least every 10 s while a DAG runs (the
30-45 s of Airflow starting the run had none), and a summary naming every DAG it ran and its
result (the last line named 4 of 7). The pure part; tests/test_cli.py runs the whole demo."""

from __future__ import annotations

from airflow_gpu_sched.tools.demo_progress import EVERY, Progress, Summary

SEVEN = ["nightly_retraining", "spot_training", "persistent_resource_training", "nightly_retraining_tuned",
         "nightly_deploy", "race_training", "race_training_sequential"]


def test_a_line_at_least_every_ten_seconds_while_it_waits():
    progress = Progress("nightly_retraining", started=100.0)
    printed = []
    now = 100.0
    for states in [[]] * 150 + [["QUEUED"]] * 400 + [["RUNNING"]] * 10 + [["SUCCEEDED"]]:  # polls 0.3 s apart
        if line := progress.line(states, now):
            printed.append((now, line))
        now += 0.3
    times = [at for at, _ in printed]
    assert times[0] == 100.0 and all(b - a <= EVERY + 0.3 for a, b in zip(times, times[1:]))
    assert now - times[-1] <= EVERY + 0.3
    lines = [line for _, line in printed]
    assert lines[0] == "  [  0.0s] nightly_retraining: Airflow is starting the run (no job yet)"
    assert any(line.endswith("nightly_retraining jobs: QUEUED: 1") for line in lines)
    assert any("still waiting (jobs: QUEUED: 1)" in line for line in lines)  # a queue that does not move
    assert lines[-1].endswith("jobs: SUCCEEDED: 1")  # a change is said at once


def test_the_summary_names_every_dag_and_its_result():
    summary = Summary()
    for dag_id in SEVEN:
        summary.ran(dag_id, "succeeded")
    lines = summary.lines(245.4)
    assert lines[0] == "the demo ran 7 example DAGs in 245s of real time: all succeeded"
    assert lines[1:] == [f"  {dag_id} succeeded" for dag_id in SEVEN]

    failing = Summary()
    failing.ran("nightly_retraining", "succeeded")
    failing.ran("spot_training", "failed (log: .demo/airflow_home/spot_training.log)")
    assert failing.lines(60)[0].endswith("1 failed") and failing.lines(60)[2].startswith("  spot_training failed")


def test_the_summary_keeps_its_order_when_the_dags_end_in_another():
    """The demo runs two lanes of DAGs side by side: they end in no fixed order, the summary
    lists them in the demo's own."""
    summary = Summary(order=tuple(SEVEN))
    for dag_id in reversed(SEVEN):
        summary.ran(dag_id, "succeeded")
    summary.ran("another_dag", "succeeded")
    assert summary.lines(100)[1:] == [*(f"  {dag_id} succeeded" for dag_id in SEVEN), "  another_dag succeeded"]
