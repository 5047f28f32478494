"""e2e_worker_crash: a training task whose first try stops right after its job was created.

Test-only hook (here, not in product code): on try 1 the operator writes its process id to
``$AIRFLOW_HOME/e2e-markers/<run_id>.pid`` once its job was created and recorded, then sleeps
instead of deferring, so the test can SIGKILL exactly that process in the window between create and defer.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from _e2e_task import E2E_TRAINING
from airflow_gpu_sched.operators import FlexStartTrainingOperator


class StallAfterSubmit(FlexStartTrainingOperator):
    """``running_job`` is set right after the create's name was saved (operators/run.py submit;
    the operator has no ``submit`` method to override since the split)."""

    @property
    def running_job(self):
        return self.__dict__.get("_e2e_running_job")

    @running_job.setter
    def running_job(self, name):
        self.__dict__["_e2e_running_job"] = name
        if name is None or self.__dict__.get("_e2e_stalled"):
            return
        from airflow.sdk import get_current_context

        context = get_current_context()
        if context["ti"].try_number == 1:
            self.__dict__["_e2e_stalled"] = True
            markers = Path(os.environ["AIRFLOW_HOME"]) / "e2e-markers"
            markers.mkdir(exist_ok=True)
            (markers / f"{context['run_id']}.pid").write_text(f"{os.getpid()} {name}")
            time.sleep(600)  # the test kills us here: the job exists, the task has not deferred


with DAG(dag_id="e2e_worker_crash", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["e2e"]):
    StallAfterSubmit(
        task_id="train",
        display_name="e2e-worker-crash",
        env={"EMULATOR_RUN_SECONDS": "60"},
        retries=1,
        retry_delay=timedelta(seconds=1),
        **{**E2E_TRAINING, "max_wait_duration": "24h"},  # the test holds the GPUs (see its _hold_gpus)
    )
