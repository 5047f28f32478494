"""What `airflow dags test` prints, as a newcomer reads it (issue 41): a green run of an example
prints no ``[error]`` line, no traceback and no warning from the reaper; a failed run's error
lines are its failure, not XComs read before they exist. And a connection without a project
(the operator's project_id instead) no longer hangs the task: the shared poller took the
connection's project, had none, and died without a word while its trigger waited for ever.

Through ``airflow dags test`` in its own process, on the harness's SQLite home, against the emulator."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import LOCATION, PROJECT

REPO = Path(__file__).resolve().parent.parent
ERROR = re.compile(r"\[error\s*\]")

DAG_FILE = textwrap.dedent('''
    from datetime import datetime

    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator

    with DAG(dag_id="{dag_id}", schedule=None, start_date=datetime(2026, 1, 1)):
        SpotTrainingOperator(
            task_id="train", project_id="{project}", location="{location}", deferrable={deferrable},
            image_uri="us-docker.pkg.dev/p/training/trainer:latest", retries=0,
            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
            env={env!r}, base_output_dir="gs://b/{dag_id}", poll_interval=0.3,
        )
''')


def _dags_test(tmp_path: Path, emulator, dag_id: str, *, deferrable: bool, env: dict, conn_extra: dict,
               dags_folder: Path | None = None) -> tuple[int, str]:
    if dags_folder is None:
        dags_folder = tmp_path / "dags"
        dags_folder.mkdir()
        (dags_folder / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, project=PROJECT, location=LOCATION,
                                                                  deferrable=deferrable, env=env))
    run_env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder), "PYTHONPATH": str(REPO),
               "AIRFLOW__GPU_SCHED__REAPER_INTERVAL": "0.5",  # a reaper pass would come in every run
               "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform",
                                                                "extra": {"api_endpoint": emulator.url, **conn_extra}}),
               "GPU_SCHED_PROJECT": PROJECT, "GPU_SCHED_POLL_INTERVAL": "0.3",
               "GPU_SCHED_EMULATED_RUN_SECONDS": "60"}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=run_env, capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)  # a hang guard
    return run.returncode, run.stdout + run.stderr


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "in-process"])
def test_a_green_example_run_prints_no_error_and_no_reaper_warning(airflow_db, fast_emulator, tmp_path, deferrable):
    code, out = _dags_test(tmp_path, fast_emulator, "spot_training", deferrable=deferrable, env={},
                           conn_extra={"project": PROJECT},
                           dags_folder=None if not deferrable else REPO / "dags_examples")
    assert code == 0, out[-4000:]
    assert "Marking run <DagRun spot_training" in out and "successful" in out, out[-3000:]
    errors = [line for line in out.splitlines() if ERROR.search(line) or "Traceback" in line]
    assert errors == [], "\n".join(errors)
    assert "reaper" not in out, [line for line in out.splitlines() if "reaper" in line]


def test_a_failed_run_prints_only_its_failure(airflow_db, fast_emulator, tmp_path):
    code, out = _dags_test(tmp_path, fast_emulator, "user_code_fails", deferrable=True,
                           env={"EMULATOR_EXIT_CODE": "3"}, conn_extra={"project": PROJECT})
    assert "TrainingJobFailedNoRetry" in out, out[-4000:]
    assert "XCom not found" not in out, [line for line in out.splitlines() if "XCom not found" in line]
    errors = [line for line in out.splitlines() if ERROR.search(line)]
    failure = ("the job failed; last", "Task failed with exception")  # the job's tail, then Airflow's own
    assert errors and all(any(part in line for part in failure) for line in errors), "\n".join(errors)


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "in-process"])
def test_a_connection_without_a_project_still_watches_the_job(airflow_db, fast_emulator, tmp_path, deferrable):
    """The README's first DAG: the project in the operator only. It hung after the job succeeded."""
    code, out = _dags_test(tmp_path, fast_emulator, "no_project_in_connection", deferrable=deferrable, env={},
                           conn_extra={})
    assert code == 0 and "Marking run <DagRun no_project_in_connection" in out, out[-4000:]
    assert "shared poll" not in out, out[-3000:]
