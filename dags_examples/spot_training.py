"""Training on Spot VMs, resuming from checkpoints across preemptions.

Vertex AI restarts a preempted job up to six times; past that the operator submits a new
job (at most ``max_preemption_retries`` times) with the same ``base_output_dir``, so
``AIP_CHECKPOINT_DIR`` is the same folder and the training script (``training/train.py``)
resumes from its last checkpoint.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _settings import BUCKET, EMULATOR_ENV, IMAGE, LOCATION, POLL_INTERVAL, PROJECT_ID
from airflow_gpu_sched.operators import SpotTrainingOperator

with DAG(
    dag_id="spot_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["gpu-training", "example"],
    doc_md=__doc__,
):
    SpotTrainingOperator(
        task_id="train_on_spot",
        project_id=PROJECT_ID,
        location=LOCATION,
        display_name="spot-training-{{ ds_nodash }}",
        worker_pool_specs=[{
            "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                            "acceleratorCount": 1},
            "replicaCount": 1,
            "containerSpec": {"imageUri": IMAGE, "command": ["python", "train.py"], "args": ["--steps=300"],
                              "env": [{"name": k, "value": v} for k, v in EMULATOR_ENV.items()]},
        }],
        base_output_dir=BUCKET + "/spot/{{ ds_nodash }}",
        max_preemption_retries=3,
        poll_interval=POLL_INTERVAL,
    )
