"""A hedged race for scarce H100s: FLEX_START in two regions and SPOT in a third, all asked at
once; the first to reach RUNNING trains, the others are cancelled at once (queued FLEX_START
and SPOT jobs are not billed). If no member gets its GPUs, the plan moves on (STANDARD).

``race_training_sequential`` is the same plan, one step at a time, as a plan ran before races:
``make demo`` runs both under the same capacity and prints the time to GPUs of each.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from _settings import BUCKET, EMULATOR_ENV, IMAGE, LOCATION, POLL_INTERVAL, PROJECT_ID
from airflow_gpu_sched.operators import GpuTrainingOperator

REGIONS = ("us-central1", "us-east4", "us-west1") if LOCATION == "us-central1" else (LOCATION,) * 3
MEMBERS = [
    {"strategy": "FLEX_START", "max_wait_duration": "30m", "locations": [REGIONS[0]]},
    {"strategy": "FLEX_START", "max_wait_duration": "30m", "locations": [REGIONS[1]]},
    {"strategy": "SPOT", "locations": [REGIONS[2]], "capacity_wait_timeout": "2h"},
]
PLANS = {
    "race_training": [{"race": MEMBERS}, {"strategy": "STANDARD"}],
    "race_training_sequential": [*MEMBERS, {"strategy": "STANDARD"}],
}

for dag_id, plan in PLANS.items():
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
             tags=["gpu-training", "example"], doc_md=__doc__):
        GpuTrainingOperator(
            task_id="train",
            project_id=PROJECT_ID,
            location=LOCATION,
            display_name=f"{dag_id}-{{{{ ds_nodash }}}}",
            image_uri=IMAGE,
            command=["python", "train.py"],
            args=["--steps=100"],
            env=EMULATOR_ENV,
            machine_type="a3-highgpu-8g",
            accelerator_type="NVIDIA_H100_80GB",
            accelerator_count=8,
            base_output_dir=BUCKET + f"/{dag_id}/{{{{ ds_nodash }}}}",
            plan=plan,
            poll_interval=POLL_INTERVAL,
        )
