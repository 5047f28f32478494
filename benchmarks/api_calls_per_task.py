"""API calls one training task makes, per job type, with and without the quota preflight.

Each case runs a SPOT task (``deferrable=False``: the same trigger loop, in this process) from
submit to success against the emulator, and counts the requests the emulator served, per RPC.
Vertex allows about 600 read requests per minute per project and region, so what a task
spends outside its polling (the preflight, the final read of a tuning job's trials) is worth
knowing side by side. Counts, not times: they do not depend on the machine. The job's log
stream (``stream_logs``) reads Cloud Logging, another API with its own quota, a number of times
that depends on how long the job runs: shown apart as ``logging_calls``, not in ``calls``.

    python benchmarks/api_calls_per_task.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.airflow_harness

STUDY = {"metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
         "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1}}]}
JOB_TYPES = {
    "custom_job": {},
    "hyperparameter_tuning_job": dict(study_spec=STUDY, max_trial_count=4, parallel_trial_count=2),
    "training_pipeline": dict(model_display_name="m", model_serving_image_uri="gcr.io/p/serve:1"),
}
SCENARIO = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}


def measure() -> dict:
    from tests.airflow_harness import set_airflow_env

    set_airflow_env(tempfile.mkdtemp(prefix="airflow_home_"))
    from airflow_gpu_sched.emulator import EmulatorServer
    from airflow_gpu_sched.emulator.control import EmulatorControl
    from airflow_gpu_sched.operators import SpotTrainingOperator

    figures: dict = {}
    with EmulatorServer() as server:
        os.environ["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"project": "p", "api_endpoint": server.url}})
        control = EmulatorControl(server.url)
        # one task first, not counted: the first task of a process makes one read more than the
        # next (its imports outlast the job's first states), which would be charged to whichever
        # case ran first, not to the preflight or the job type
        cases = [("custom_job", False, False)] + [(t, p, True) for t in JOB_TYPES for p in (False, True)]
        for job_type, preflight, counted in cases:
            control.reset(SCENARIO)
            SpotTrainingOperator(
                task_id="t", project_id="p", location="us-central1", deferrable=False, poll_interval=1.0,
                image_uri="gcr.io/p/t:1", machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
                accelerator_count=1, job_type=job_type, quota_preflight=preflight, **JOB_TYPES[job_type],
            ).execute({})
            if not counted:
                continue
            requests = control.stats()["requests"]
            logging_calls = requests.pop("entries.list", 0)
            figures[f"{job_type}{'+preflight' if preflight else ''}"] = {
                "calls": sum(requests.values()), "per_rpc": dict(sorted(requests.items())),
                "logging_calls": logging_calls}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = parser.parse_args()
    figures = measure()
    print(f"{'case':38} {'calls':>5}  per RPC")
    for case, row in figures.items():
        print(f"{case:38} {row['calls']:5}  {row['per_rpc']}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
