"""Training on a persistent resource: no VM start-up; waits while the shared pool is busy.

Every worker pool must match a resource pool of ``a100-pool`` exactly (machine type,
accelerator, boot disk type) and fit its size; the task fails before submitting otherwise.
The training script contract is the same as for SPOT (``training/train.py``).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _settings import BUCKET, EMULATOR_ENV, IMAGE, LOCATION, POLL_INTERVAL, PROJECT_ID
from airflow_gpu_sched.operators import PersistentResourceTrainingOperator

with DAG(
    dag_id="persistent_resource_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["gpu-training", "example"],
    doc_md=__doc__,
):
    PersistentResourceTrainingOperator(
        task_id="train_on_pool",
        project_id=PROJECT_ID,
        location=LOCATION,
        persistent_resource_id="a100-pool",
        capacity_wait_timeout="2h",  # the service's time: at the demo's 120x, 60 real s (the blocker runs 25)
        image_uri=IMAGE,
        command=["python", "train.py"],
        args=["--steps=200"],
        env=EMULATOR_ENV,
        machine_type="a2-highgpu-1g",
        accelerator_type="NVIDIA_TESLA_A100",
        accelerator_count=1,
        base_output_dir=BUCKET + "/pool/{{ ds_nodash }}",
        poll_interval=POLL_INTERVAL,
    )
