"""The platform team's commands (`jobs list`, `jobs orphans`, `plan check`, `quota check`), driven
through ``main(argv)`` with captured output, against the emulator and a real Airflow metadata DB
(the SQLite one ``dag.test()`` runs on)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
import yaml

from airflow_gpu_sched.tools.cli import main
from tests.airflow_harness import run_dag
from tests.conftest import FAST, LOCATION, PROJECT, every_custom_job

REPO = Path(__file__).resolve().parent.parent
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
WHERE = ["--project", PROJECT, "--location", LOCATION]


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


@pytest.fixture
def held(airflow_db, vertex_conn):
    """Jobs that run until the test moves emulated time: an orphan's job must still be active when
    `jobs orphans` lists it. (At 100x a job ends 0.4 s after its create, and on a busy machine the
    DAG run's teardown alone took longer: the job had SUCCEEDED and was no orphan.)"""
    vertex_conn.reset({**FAST, "speed": 1, "runSeconds": 7 * 24 * 3600})
    return vertex_conn


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what the DAG run logged before
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _dies_after_create_dag(dag_id: str):
    """A task whose worker dies right after its job was created: the task fails, the job runs on."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator

    class DiesAfterCreate(SpotTrainingOperator):
        def wait_for_job(self, context, job_name, *args, **kwargs):
            raise SystemExit("worker killed")

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        DiesAfterCreate(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                        poll_interval=0.02, retries=0, **A100)
    return dag


def _every_job(emulator) -> list[dict]:
    return every_custom_job(emulator)


def _state(emulator, name: str) -> str:
    return requests.get(f"{emulator.url}/v1/{name}", timeout=5).json()["state"]


def test_jobs_list_shows_dag_task_try_strategy_and_state_from_labels_and_spec(airflow, capsys):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import FlexStartTrainingOperator

    with DAG("cli_listed", schedule=None, start_date=START) as dag:
        FlexStartTrainingOperator(task_id="Train.Big", project_id=PROJECT, location=LOCATION,
                                  image_uri="gcr.io/p/trainer:1", max_wait_duration="1h", poll_interval=0.02,
                                  **A100)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    # a job of someone else in the same region is not listed
    requests.post(f"{airflow.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5, json={
        "displayName": "not-ours", "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                                                                     "replicaCount": "1",
                                                                     "containerSpec": {"imageUri": "gcr.io/p/x"}}]}})

    code, out, _ = cli(capsys, "jobs", "list", *WHERE, "-o", "json")
    assert code == 0
    [row] = json.loads(out)
    assert row["name"] == result["Train.Big"].return_value["job_name"]
    assert (row["dag"], row["task"], row["try_number"], row["strategy"], row["state"]) == (
        "cli_listed", "train-big", "1", "FLEX_START", "JOB_STATE_SUCCEEDED")
    assert row["run"] == result.run_id.lower().replace(":", "-").replace("+", "-").replace(".", "-")
    assert row["created"] and row["ended"] and row["job_type"] == "custom_job"

    code, out, _ = cli(capsys, "jobs", "list", *WHERE, "--wide")  # every column
    header, line = out.splitlines()
    assert header.split()[:6] == ["DAG", "TASK", "MAP_INDEX", "TRY_NUMBER", "STRATEGY", "STATE"]
    assert line.split()[:6] == ["cli_listed", "train-big", "-", "1", "FLEX_START", "JOB_STATE_SUCCEEDED"]

    code, out, _ = cli(capsys, "jobs", "list", *WHERE)  # for a terminal: 120 columns (tests/test_cli_table.py)
    header, line = out.splitlines()
    assert header.split() == ["DAG", "TASK", "TRY", "STRATEGY", "STATE", "CREATED", "JOB"]
    assert line.split()[:5] == ["cli_listed", "train-big", "1", "FLEX_START", "SUCCEEDED"]
    assert line.split()[-1] == row["name"].rsplit("/", 1)[-1]

    code, out, _ = cli(capsys, "jobs", "list", *WHERE, "--job-type", "training_pipeline")
    assert code == 0 and out.strip() == "(none)"


def test_orphans_finds_the_job_of_a_failed_task_and_cancel_yes_cancels_it(held, capsys):
    from sqlalchemy import update

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    result = run_dag(_dies_after_create_dag("cli_orphaned"), logical_date=START)
    assert result["train"].state == "failed"
    [name] = [j["name"] for j in _every_job(held)]
    assert _state(held, name) not in ("JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING")  # the job ran on

    code, out, _ = cli(capsys, "jobs", "orphans", *WHERE, "-o", "json")
    [orphan] = json.loads(out)
    assert code == 0 and orphan["name"] == name and orphan["dag"] == "cli_orphaned"
    assert orphan["why"] == f"task instance is failed (run {result.run_id}, try 1)"

    # the same task instance alive again (a retry queued): its job is looked after, not an orphan
    with create_session() as session:
        session.execute(update(TaskInstance).where(TaskInstance.dag_id == "cli_orphaned")
                        .values(state="up_for_retry"))
    code, out, _ = cli(capsys, "jobs", "orphans", *WHERE, "-o", "json")
    assert json.loads(out) == []
    with create_session() as session:
        session.execute(update(TaskInstance).where(TaskInstance.dag_id == "cli_orphaned").values(state="failed"))

    code, out, err = cli(capsys, "jobs", "orphans", *WHERE, "--cancel", "--yes")
    assert code == 0 and "task instance is failed" in out and f"cancel requested: {name}" in err
    assert _state(held, name) in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    held.advance(10)
    code, out, _ = cli(capsys, "jobs", "orphans", *WHERE)
    assert out.strip() == "(none)"


def test_orphans_cancel_asks_first_and_no_cancels_nothing(held, capsys, monkeypatch):
    run_dag(_dies_after_create_dag("cli_orphan_asked"), logical_date=START)
    [name] = [j["name"] for j in _every_job(held)]

    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))  # Enter: the default, No
    code, _, err = cli(capsys, "jobs", "orphans", *WHERE, "--cancel")
    assert code == 1 and "Cancel 1 job(s) of this deployment? [y/N]" in err and "nothing cancelled" in err
    assert _state(held, name) not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, _, err = cli(capsys, "jobs", "orphans", *WHERE, "--cancel")
    assert code == 0 and f"cancel requested: {name}" in err
    assert _state(held, name) in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")


def test_a_job_whose_run_was_deleted_is_an_orphan(held, capsys):
    """No task instance at all (the run was deleted): the job is an orphan too."""
    from sqlalchemy import delete

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    run_dag(_dies_after_create_dag("cli_run_deleted"), logical_date=START)
    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == "cli_run_deleted"))
    code, out, _ = cli(capsys, "jobs", "orphans", *WHERE, "-o", "json")
    orphans = json.loads(out)
    assert len(orphans) == 1, [(j["name"], j["state"], j.get("labels")) for j in _every_job(held)]
    [orphan] = orphans
    assert orphan["dag"] == "cli_run_deleted" and orphan["why"] == "no task instance of it in the metadata DB"


def _labelled_job(emulator, **labels: str) -> str:
    """A job by hand, labelled as the operator labels its jobs (``labels`` on top)."""
    body = {"displayName": "by-hand", "labels": {"managed-by": "airflow-gpu-sched", "airflow-task": "train",
                                                 "airflow-try": "1", **labels},
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                             "containerSpec": {"imageUri": "gcr.io/p/x"}}]}}
    return requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5,
                         json=body).json()["name"]


def test_orphans_cancels_only_this_deployments_jobs_in_a_shared_project(held, capsys, monkeypatch):
    """Staging and prod share the project and the DAG. Staging's `jobs orphans --cancel` must not
    cancel prod's job of a run staging also ran (its copy failed), nor prod's job of a run staging
    never had, nor a job with no deployment label: they are shown, marked, never cancelled."""
    from airflow_gpu_sched.orchestration.orphans import label_value

    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "prod")
    result = run_dag(_dies_after_create_dag("cli_shared"), logical_date=START)  # the run, as staging has it too
    [prod_same_run] = [j["name"] for j in _every_job(held)]
    run = label_value(result.run_id)
    prod_other_run = _labelled_job(held, **{"airflow-dag": "cli_shared", "airflow-run": "scheduled__elsewhere",
                                            "airflow-deployment": "prod"})
    legacy = _labelled_job(held, **{"airflow-dag": "cli_shared", "airflow-run": run})  # before the label existed
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "staging")
    own = _labelled_job(held, **{"airflow-dag": "cli_shared", "airflow-run": run, "airflow-deployment": "staging"})

    code, out, err = cli(capsys, "jobs", "orphans", *WHERE, "-o", "json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0 and list(rows)[0] == own  # this deployment's first
    assert {name: (row["owner"], row["deployment"]) for name, row in rows.items()} == {
        own: ("this deployment", "staging"), prod_same_run: ("other deployment", "prod"),
        prod_other_run: ("other deployment", "prod"), legacy: ("unknown", None)}
    assert "another deployment's job" in rows[prod_other_run]["why"]
    assert "no airflow-deployment label" in rows[legacy]["why"] and "gcloud ai custom-jobs cancel" in rows[legacy]["why"]
    assert "3 of these job(s) belong to another deployment or to none known" in err and "staging" in err

    code, out, err = cli(capsys, "jobs", "orphans", *WHERE, "--cancel", "--yes")
    assert code == 0 and err.count("cancel requested") == 1 and f"cancel requested: {own}" in err
    assert _state(held, own) in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    for name in (prod_same_run, prod_other_run, legacy):
        assert _state(held, name) not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"), name
    assert held.stats()["cancels"] == 1


def test_jobs_are_labelled_with_the_deployment_that_created_them(held, capsys, monkeypatch):
    """Unset, the id is the Variable the first submitting task creates; the CLI reads the same one
    from the database; set, the option wins; a bad one fails the task before any call."""
    from airflow_gpu_sched.orchestration import deployment

    monkeypatch.delenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", raising=False)
    run_dag(_dies_after_create_dag("cli_labelled_first"), logical_date=START)
    run_dag(_dies_after_create_dag("cli_labelled_again"), logical_date=START)
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "prod-eu")
    run_dag(_dies_after_create_dag("cli_labelled_set"), logical_date=START)
    labelled = {j["labels"]["airflow-dag"]: j["labels"]["airflow-deployment"] for j in _every_job(held)}
    monkeypatch.delenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID")
    mine = deployment.read_from_database()
    assert mine.startswith("dep-") and len(mine) == 20
    assert labelled == {"cli_labelled_first": mine, "cli_labelled_again": mine, "cli_labelled_set": "prod-eu"}
    code, out, _ = cli(capsys, "jobs", "orphans", *WHERE, "-o", "json")  # the CLI finds them its own
    assert code == 0 and {r["dag"]: r["owner"] for r in json.loads(out)} == {
        "cli_labelled_first": "this deployment", "cli_labelled_again": "this deployment",
        "cli_labelled_set": "other deployment"}

    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "Prod EU")  # refused, named, before any call
    result = run_dag(_dies_after_create_dag("cli_labelled_bad"), logical_date=START)
    assert result["train"].state == "failed" and "cli_labelled_bad" not in {
        j["labels"]["airflow-dag"] for j in _every_job(held)}
    code, _, err = cli(capsys, "jobs", "orphans", *WHERE)
    assert code == 2 and "[gpu_sched] deployment_id" in err and "is not a label value" in err


DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_gpu_sched.operators import GpuTrainingOperator

with DAG("cli_planned", schedule=None, start_date=datetime(2026, 1, 1)):
    GpuTrainingOperator(
        task_id="train", project_id="{project}", location="us-central1", image_uri="gcr.io/p/trainer:1",
        machine_type="a2-highgpu-{count}g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count={count},
        plan=[{{"strategy": "FLEX_START", "max_wait_duration": "2h", "locations": ["us-central1", "us-east4"]}},
              {{"strategy": "SPOT"}},
              {{"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "pool-a"}}])
"""


def _dag_file(tmp_path, count: int = 1, **extra: str) -> str:
    path = tmp_path / "planned.py"
    path.write_text(DAG_FILE.format(project=PROJECT, count=count, **extra))
    return str(path)


def test_plan_check_lists_each_step_its_regions_and_the_rules_it_passes(airflow_db, tmp_path, capsys):
    code, out, _ = cli(capsys, "plan", "check", _dag_file(tmp_path), "-o", "json")
    rows = json.loads(out)
    assert code == 0
    assert [(r["task"], r["position"], r["step"].split("(")[0], r["regions"], r["violations"]) for r in rows] == [
        ("train", 0, "FLEX_START", ["us-central1", "us-east4"], []),
        ("train", 1, "SPOT", ["us-central1"], []),
        ("train", 2, "PERSISTENT_RESOURCE", ["us-central1"], [])]
    assert "max_wait_duration=2:00:00" in rows[0]["step"]
    assert "pool-a" in rows[2]["step"]
    assert rows[0]["rules"] == ["general", "FLEX_START"] and rows[2]["rules"] == ["general", "persistent resource"]

    code, out, _ = cli(capsys, "plan", "check", _dag_file(tmp_path))
    assert out.splitlines()[0].split() == ["DAG", "TASK", "POSITION", "STEP", "REGIONS", "RULES", "VIOLATIONS",
                                         "COST"]
    assert "us-central1; us-east4" in out.splitlines()[1]


def test_plan_check_prints_each_steps_expected_cost_and_whether_the_budget_allows_it(airflow_db, tmp_path, capsys):
    prices = ('prices={"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 1.0, "SPOT": 1.5, '
              '"PERSISTENT_RESOURCE": 0}}, budget=1.2, expected_run_time="1h",')
    path = tmp_path / "costed.py"
    path.write_text(DAG_FILE.format(project=PROJECT, count=1).replace('task_id="train",', 'task_id="train", ' + prices))
    code, out, _ = cli(capsys, "plan", "check", str(path), "-o", "json")
    assert code == 0
    assert [r["cost"] for r in json.loads(out)] == [
        ["us-central1: 1 USD, fits", "us-east4: 1 USD, fits"],
        ["us-central1: 1.5 USD, over: SPOT in us-central1: expected cost 1.5 USD is over what is left of the "
         "budget (1.2 of 1.2)"],
        ["us-central1: 0 USD, fits"]]


def test_plan_check_of_a_dag_that_breaks_a_rule_names_the_field(airflow_db, tmp_path, capsys):
    path = tmp_path / "bad.py"
    text = DAG_FILE.format(project=PROJECT, count=1).replace("accelerator_count=1", "accelerator_count=3")
    path.write_text(textwrap.dedent(text))  # a2-highgpu-1g has 1 A100
    code, out, err = cli(capsys, "plan", "check", str(path))
    assert code == 2 and out == ""
    assert str(path) in err and "Traceback" not in err  # the exception, not Airflow's stored traceback
    assert ("acceleratorCount: plan[0] FLEX_START: 'a2-highgpu-1g' takes NVIDIA_TESLA_A100 in counts of [1] "
            "(got 3)") in err
    assert "plan[1] SPOT" in err and "plan[2] PERSISTENT_RESOURCE" in err  # every step's violation


def test_quota_check_compares_each_step_and_region_with_the_quota(airflow, tmp_path, capsys):
    airflow.set_quota_limit("custom_model_training_preemptible_nvidia_a100_gpus", 1, region="us-east4")
    airflow.set_quota_limit("custom_model_training_preemptible_nvidia_a100_gpus", 16, region="us-central1")
    code, out, _ = cli(capsys, "quota", "check", _dag_file(tmp_path, count=2), "-o", "json")
    rows = {(r["step"], r["region"]): r for r in json.loads(out)}
    assert code == 1  # a quota too low: a non-zero exit for scripts
    assert rows["FLEX_START", "us-east4"]["verdict"] == "TOO LOW: needs 2, limit 1"
    assert rows["FLEX_START", "us-central1"]["verdict"] == "ok" and rows["FLEX_START", "us-central1"]["limit"] == 16
    assert rows["FLEX_START", "us-east4"]["metric"] == (
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus")
    assert rows["PERSISTENT_RESOURCE", "us-central1"]["verdict"].startswith("no quota")

    airflow.set_quota_limit("custom_model_training_preemptible_nvidia_a100_gpus", 8, region="us-east4")
    code, out, _ = cli(capsys, "quota", "check", _dag_file(tmp_path, count=2))
    assert code == 0 and "TOO LOW" not in out and "us-east4" in out


RACE_DAG_FILE = DAG_FILE.replace(
    '{{"strategy": "SPOT"}},',
    '{{"race": [{{"strategy": "FLEX_START", "locations": ["europe-west4"]}}, {{"strategy": "SPOT", "locations": ["us-east4"]}}]}},')


def test_plan_and_quota_check_show_every_member_of_a_race_in_its_own_region(airflow, tmp_path, capsys):
    """A race submits all its members at once: each is checked, and needs its quota, in its region."""
    path = tmp_path / "raced.py"
    path.write_text(RACE_DAG_FILE.format(project=PROJECT, count=2))
    code, out, _ = cli(capsys, "plan", "check", str(path), "-o", "json")
    rows = [(r["position"], r["step"].split(": ")[-1].split("(")[0], r["regions"], r["rules"])
            for r in json.loads(out)]
    assert code == 0
    assert rows[1:3] == [(1, "FLEX_START", ["europe-west4"], ["general", "FLEX_START"]),
                         (1, "SPOT", ["us-east4"], ["general", "SPOT"])], rows
    airflow.set_quota_limit("custom_model_training_preemptible_nvidia_a100_gpus", 1, region="us-east4")
    code, out, _ = cli(capsys, "quota", "check", str(path), "-o", "json")
    quota = {(r["step"], r["region"]): r["verdict"] for r in json.loads(out)}
    assert code == 1 and quota["SPOT", "us-east4"] == "TOO LOW: needs 2, limit 1", quota
    assert ("FLEX_START", "europe-west4") in quota and ("RACE", "us-central1") not in quota


def _airflow() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def test_the_airflow_cli_has_the_same_commands_as_a_provider_group(airflow, tmp_path):
    """`airflow gpu-sched ...` (the provider info's ``cli`` key), in its own process, as users run it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    good = subprocess.run([_airflow(), "gpu-sched", "plan", "check", _dag_file(tmp_path), "-o", "json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert good.returncode == 0, good.stderr
    assert [row["step"].split("(")[0] for row in json.loads(good.stdout)] == [
        "FLEX_START", "SPOT", "PERSISTENT_RESOURCE"]

    bad = tmp_path / "bad.py"
    bad.write_text(DAG_FILE.format(project=PROJECT, count=1).replace("accelerator_count=1", "accelerator_count=3"))
    refused = subprocess.run([_airflow(), "gpu-sched", "plan", "check", str(bad)], capture_output=True, text=True,
                             env=env, timeout=120)
    assert refused.returncode == 2 and "acceleratorCount" in refused.stderr  # the exit code survives airflow's CLI

    listed = subprocess.run([_airflow(), "gpu-sched", "jobs", "list", "--location", LOCATION,
                             "--api-endpoint", airflow.url, "-o", "yaml"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0 and yaml.safe_load(listed.stdout) == []
    # no -o: a table, as --help says (issue 41: exit 2, "output: None is not one of table, ...")
    table = subprocess.run([_airflow(), "gpu-sched", "jobs", "list", "--location", LOCATION,
                            "--api-endpoint", airflow.url], capture_output=True, text=True, env=env, timeout=120)
    assert table.returncode == 0 and table.stdout == "(none)\n", table.stderr


@pytest.mark.parametrize("argv", [["jobs", "list", "--location", LOCATION], ["jobs", "orphans", "--location", LOCATION],
                                  ["plan", "check", "f.py"], ["quota", "check"]])
def test_every_listing_under_airflow_defaults_to_a_table(airflow_db, argv):
    """Airflow's CLI adds a command's options sorted by name, --json before --output: argparse took
    the shared dest's default from --json (None) and every listing without -o failed (issue 41)."""
    from airflow.cli import cli_parser

    args = cli_parser.get_parser().parse_args(["gpu-sched", *argv])
    assert args.output == "table"
    assert cli_parser.get_parser().parse_args(["gpu-sched", *argv, "--json"]).output == "json"


def _job(**labels):
    from airflow_gpu_sched.tools import platform

    base = dict(name="projects/p/locations/l/customJobs/1", job_type="custom_job", dag="nightly-x", task="train",
                map_index=None, run="manual__1", try_number="1", strategy="SPOT", state="JOB_STATE_RUNNING",
                created=None, started=None, ended=None)
    return platform.JobRow(**{**base, **labels})


def _ti(state, dag_id="Nightly.X", task_id="train", map_index=-1, run_id="manual__1", try_number=1):
    from airflow_gpu_sched.tools import platform

    return platform.TaskInstanceRow(dag_id, task_id, map_index, run_id, state, try_number)


@pytest.mark.parametrize("job, tis, orphan", [
    (_job(), [_ti("deferred")], False),                                       # ids matched as label values
    (_job(), [_ti("failed")], True),
    (_job(state="JOB_STATE_SUCCEEDED"), [_ti("failed")], False),              # ended: nothing to cancel
    (_job(), [_ti("running", run_id="manual__2"), _ti("success")], True),      # another run alive: not its owner
    (_job(run=None), [_ti("running", run_id="manual__2"), _ti("failed")], False),  # no run label: any run
    (_job(map_index="2"), [_ti("running", map_index=1), _ti("failed", map_index=2)], True),
    (_job(map_index="1"), [_ti("running", map_index=1), _ti("failed", map_index=2)], False),
    (_job(), [], True),
    (_job(task=None), [], False),                                             # not submitted by an operator
])
def test_which_active_jobs_are_orphans(job, tis, orphan):
    from airflow_gpu_sched.tools import platform

    assert [o.job for o in platform.find_orphans([job], tis)] == ([job] if orphan else [])


def test_quota_check_without_a_dag_lists_the_regions_gpu_quotas(fast_emulator, capsys):
    fast_emulator.set_quota_limit("custom_model_training_preemptible_nvidia_h100_gpus", 3, region="us-east4")
    code, out, _ = cli(capsys, "quota", "check", "--location", "us-east4", "-o", "json")
    limits = {row["metric"].rsplit("/", 1)[-1]: row["limit"] for row in json.loads(out)}
    assert code == 0 and limits["custom_model_training_preemptible_nvidia_h100_gpus"] == 3
    code, _, err = cli(capsys, "quota", "check")
    assert code == 2 and "give a DAG_FILE, or --location" in err


def test_a_missing_connection_is_one_error_line_naming_it(airflow_db, capsys, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    code, out, err = cli(capsys, "jobs", "list", "--location", LOCATION, "--conn-id", "no_such_conn")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "no_such_conn" in err and "airflow connections add" in err


def test_api_endpoint_without_a_connection_reads_the_emulator(emulator, airflow_db, capsys, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5, json={
        "displayName": "by-hand", "labels": {"managed-by": "airflow-gpu-sched", "airflow-dag": "d"},
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                         "containerSpec": {"imageUri": "gcr.io/p/x"}}]}})
    code, out, _ = cli(capsys, "jobs", "list", *WHERE, "--api-endpoint", emulator.url, "-o", "json")
    [row] = json.loads(out)
    assert code == 0 and row["dag"] == "d" and row["task"] is None and row["strategy"] == "STANDARD"


def test_a_tuning_jobs_trials_are_linked_to_it_and_only_the_tuning_job_is_an_orphan():
    from airflow_gpu_sched.tools import platform

    tuning = _job(name="projects/p/locations/l/hyperparameterTuningJobs/7", job_type="hyperparameter_tuning_job",
                  submission="k1")
    trial = _job(name="projects/p/locations/l/customJobs/8", submission="k1")
    other = _job(name="projects/p/locations/l/customJobs/9", submission="k2")
    linked = platform.link_children([tuning, trial, other])
    assert [r.parent for r in linked] == [None, tuning.name, None]
    assert [o.job.name for o in platform.find_orphans(linked, [_ti("failed")])] == [tuning.name, other.name]


# ---------------------------------------------------------------------- conventions, as users run it

def _script() -> str:
    """The installed console script (``[project.scripts]``), run with this checkout on PYTHONPATH."""
    return str(Path(sys.executable).with_name("airflow-gpu-sched"))


def run_script(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([_script(), *argv], capture_output=True, text=True, env=env, timeout=timeout)


def _managed_job(emulator, dag: str = "d") -> None:
    requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=5, json={
        "displayName": "by-hand", "labels": {"managed-by": "airflow-gpu-sched", "airflow-dag": dag},
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                         "containerSpec": {"imageUri": "gcr.io/p/x"}}]}})


def test_version_and_help_are_for_users():
    from airflow_gpu_sched import __version__

    version = run_script("--version")
    assert version.returncode == 0 and version.stdout == f"airflow-gpu-sched {__version__}\n"
    helped = run_script("--help")
    assert helped.returncode == 0
    assert "May import" not in helped.stdout and "never airflow" not in helped.stdout  # no internal notes
    assert "exit codes: 0 ok; 1 findings" in helped.stdout and "3 API or connection error" in helped.stdout
    listing = run_script("jobs", "list", "--help").stdout
    # the choices, as each Python's argparse writes them (3.13 names them once, after both flags)
    assert ("-o (table, json, yaml, plain), --output (table, json, yaml, plain)" in listing
            or "-o, --output (table, json, yaml, plain)" in listing), listing
    assert "--wait" in listing


def test_every_listing_format_and_the_deprecated_json_alias(vertex_conn):
    _managed_job(vertex_conn)
    where = ["jobs", "list", *WHERE]

    def stable(row: dict) -> tuple:  # the job moves on between two commands (QUEUED, then RUNNING...)
        return row["name"], row["dag"], row["job_type"], row["strategy"], row["created"]

    as_json = run_script(*where, "-o", "json")
    assert as_json.returncode == 0 and as_json.stderr == "", as_json.stderr
    [row] = json.loads(as_json.stdout)
    assert row["dag"] == "d" and row["strategy"] == "STANDARD" and set(row) >= set(JOB_COLUMNS)

    as_yaml = run_script(*where, "--output", "yaml")
    [yaml_row] = yaml.safe_load(as_yaml.stdout)
    assert as_yaml.returncode == 0 and set(yaml_row) == set(row) and stable(yaml_row) == stable(row)

    plain = run_script(*where, "-o", "plain").stdout.splitlines()
    assert plain[0].split("\t") == JOB_COLUMNS and len(plain) == 2
    plain_row = dict(zip(JOB_COLUMNS, plain[1].split("\t")))
    assert (plain_row["name"], plain_row["task"], plain_row["created"]) == (row["name"], "-", row["created"])

    table = run_script(*where).stdout.splitlines()
    assert table[0].split()[:2] == ["DAG", "TASK"] and table[1].split()[0] == "d"

    alias = run_script(*where, "--json")  # the old flag still works, and says it is going away
    [alias_row] = json.loads(alias.stdout)
    assert alias.returncode == 0 and stable(alias_row) == stable(row)
    assert "--json is deprecated" in alias.stderr and "-o json" in alias.stderr

    empty = run_script("jobs", "list", "--project", PROJECT, "--location", "europe-west4", "-o", "yaml")
    assert empty.returncode == 0 and yaml.safe_load(empty.stdout) == []
    assert run_script("jobs", "list", *WHERE, "-o", "csv").returncode == 2  # not a format


JOB_COLUMNS = ["dag", "task", "map_index", "try_number", "strategy", "state", "created", "started", "ended",
               "job_type", "deployment", "name"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_endpoint_is_one_line_and_exit_3_without_retries(airflow_db):
    dead = f"http://127.0.0.1:{_free_port()}"
    run = run_script("jobs", "list", *WHERE, "--conn-id", "no_such_conn", "--api-endpoint", dead)
    assert run.returncode == 3 and run.stdout == ""
    assert run.stderr.splitlines() == [f"error: cannot reach {dead}: connection refused "
                                       "(not retried; --wait retries for a while)"], run.stderr
    assert "retrying" not in run.stderr and "Traceback" not in run.stderr


def test_wait_is_what_turns_retries_on():
    from airflow_gpu_sched.tools import platform

    quick = platform.make_client("unused", LOCATION, PROJECT, api_endpoint="http://127.0.0.1:9", wait=False)
    patient = platform.make_client("unused", LOCATION, PROJECT, api_endpoint="http://127.0.0.1:9", wait=True)
    assert quick.retry.deadline == 0 and patient.retry.deadline == platform.WAIT_SECONDS > 0


def test_an_api_error_is_exit_3_and_a_usage_error_exit_2(vertex_conn, airflow_db, tmp_path):
    refused = run_script("jobs", "list", *WHERE, "--api-endpoint", f"{vertex_conn.url}/no-such-prefix")  # a 404
    assert refused.returncode == 3 and refused.stdout == "" and refused.stderr.startswith("error: "), refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1

    assert run_script("jobs", "list").returncode == 2  # --location missing: argparse's usage error
    assert run_script("no-such-command").returncode == 2
    missing_conn = run_script("jobs", "list", *WHERE, "--conn-id", "no_such_conn")
    assert missing_conn.returncode == 2 and "airflow connections add" in missing_conn.stderr
    no_dag = run_script("plan", "check", str(tmp_path / "nope.py"))
    assert no_dag.returncode == 2 and no_dag.stderr == f"error: {tmp_path / 'nope.py'}: no such file\n"
    no_scenario = run_script("emulator", "--port", "0", "--scenario", str(tmp_path / "nope.yaml"))
    assert no_scenario.returncode == 2 and "nope.yaml" in no_scenario.stderr and "Traceback" not in no_scenario.stderr


def test_findings_are_exit_1(airflow, tmp_path):
    airflow.set_quota_limit("custom_model_training_preemptible_nvidia_a100_gpus", 1, region="us-east4")
    run = run_script("quota", "check", _dag_file(tmp_path, count=2), "-o", "json")
    assert run.returncode == 1, run.stderr
    assert "TOO LOW: needs 2, limit 1" in {r["verdict"] for r in json.loads(run.stdout)}


def test_timeline_errors_are_one_line_and_write_no_svg(emulator, tmp_path):
    out = tmp_path / "t.svg"
    cases = {  # argv -> (exit code, what the line says)
        ("--xcom", str(tmp_path / "missing.json")): (2, "missing.json: No such file or directory"),
        ("--xcom", str(tmp_path / "bad.json")): (2, "bad.json: not valid JSON"),
        ("--xcom", str(tmp_path / "list.json")): (2, "expected a task's return value (an object), got list"),
        ("--xcom", str(tmp_path / "odd.json")): (2, "not a training task's return value"),
        ("--emulator", f"http://127.0.0.1:{_free_port()}"): (3, "cannot reach http://127.0.0.1:"),
        ("--emulator", f"{emulator.url}/not-here"): (3, "answered HTTP 404"),  # an error page is not a drawing
    }
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "odd.json").write_text('{"train": 3}')
    for argv, (code, words) in cases.items():
        run = run_script("timeline", *argv, "--out", str(out))
        assert run.returncode == code and words in run.stderr, (argv, run.stderr)
        assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1 and not out.exists(), argv
    good = run_script("timeline", "--emulator", emulator.url, "--out", str(out))
    assert good.returncode == 0 and out.read_text().startswith("<svg")
