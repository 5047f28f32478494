"""What every e2e training task shares: one A100 on FLEX_START in the e2e project, 1-second polls.

A plain module next to the DAG files (copied with them; the DAGs folder is on ``sys.path``)."""

import os
import time
from pathlib import Path

from airflow_gpu_sched.operators import FlexStartTrainingOperator

E2E_TRAINING = dict(
    project_id="e2e-project",
    location="us-central1",
    image_uri="us-docker.pkg.dev/e2e-project/training/trainer:latest",
    machine_type="a2-highgpu-1g",
    accelerator_type="NVIDIA_TESLA_A100",
    accelerator_count=1,
    max_wait_duration="1h",
    poll_interval=1,
)


class StallAfterCreate(FlexStartTrainingOperator):
    """Test-only: on try 1, once its job was created and recorded (``running_job`` is set right
    after the create's name was saved, operators/run.py submit), the task calls ``stall`` once,
    so a test can SIGKILL it between create and defer. ``wants_stall`` and ``stall`` are the
    DAGs' hooks; the default writes ``$AIRFLOW_HOME/e2e-markers/<run_id>.pid`` and sleeps."""

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
        if context["ti"].try_number == 1 and self.wants_stall(context):
            self.__dict__["_e2e_stalled"] = True
            self.stall(context, name)

    def wants_stall(self, context):
        return True

    def stall(self, context, name):
        markers = Path(os.environ["AIRFLOW_HOME"]) / "e2e-markers"
        markers.mkdir(exist_ok=True)
        (markers / f"{context['run_id']}.pid").write_text(f"{os.getpid()} {name}")
        time.sleep(600)  # the test kills us here: the job exists, the task has not deferred
