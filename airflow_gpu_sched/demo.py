"""``make demo`` (until the operators land): one job of each capacity strategy on the emulator.

Starts the emulator in-process with scarce capacity (FLEX_START GPUs arrive after 20 emulated
minutes; the persistent pool is busy with another job; the SPOT job is preempted twice), submits
the three jobs with the sync client, and prints each state change with its emulated time,
then a summary of queued and run time per job.
"""

from __future__ import annotations

import time
from datetime import datetime

from airflow_gpu_sched.client import VertexClient
from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.models import CustomJob

PROJECT, LOCATION = "demo-project", "us-central1"
POOL_ID = "a100-pool"


def _pool(machine: str, accelerator: str, count: int, run_minutes: int) -> dict:
    return {"machineSpec": {"machineType": machine, "acceleratorType": accelerator, "acceleratorCount": count},
            "replicaCount": "1",
            "containerSpec": {"imageUri": "us-docker.pkg.dev/demo/trainer:1", "args": ["--epochs=3"],
                              "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_minutes * 60)}]}}


def _scenario(speed: float) -> Scenario:
    return Scenario.model_validate({
        "seed": 1, "speed": speed, "provisioningSeconds": 120, "runSeconds": 900,
        "capacity": [
            {"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB", "flexStart": 0},
            {"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB", "flexStart": 8, "atSeconds": 1200},
        ],
        "persistentResources": [{"project": PROJECT, "location": LOCATION, "id": POOL_ID, "resource": {
            "displayName": "shared A100 pool",
            "resourcePools": [{"id": "a100s", "replicaCount": "1", "machineSpec": {
                "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}]}}],
    })


JOBS = {
    "flex-start": {"displayName": "demo-flex-start", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 20)],
        "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "2h"}}},
    "spot": {"displayName": "demo-spot", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 30)],
        "scheduling": {"strategy": "SPOT"}}},
    "persistent": {"displayName": "demo-persistent", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 10)],
        "persistentResourceId": POOL_ID}},
}


def _minutes(start: datetime, at: datetime) -> str:
    seconds = int((at - start).total_seconds())
    return f"+{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def run_demo(speed: float = 120.0) -> int:
    with EmulatorServer(_scenario(speed)) as emulator:
        print(f"Vertex AI emulator at {emulator.url} (x{speed:g} speed: one real second is "
              f"{speed / 60:g} emulated minutes)\n")
        control = EmulatorControl(emulator.url)
        client = VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)
        blocker = dict(JOBS["persistent"], displayName="someone-elses-job")
        client.create_custom_job(blocker)  # keeps the pool's only replica busy for 10 minutes
        names = {label: client.create_custom_job(body).name for label, body in JOBS.items()}
        start = client.get_custom_job(names["flex-start"]).create_time
        seen: dict[str, str] = {}
        preemptions = 0
        jobs: dict[str, CustomJob] = {}
        while True:
            jobs = {label: client.get_custom_job(name) for label, name in names.items()}
            for label, job in jobs.items():
                state = job.state.value.removeprefix("JOB_STATE_")
                if seen.get(label) != state:
                    note = f"  ({job.error.message})" if job.error and job.error.message else ""
                    print(f"  {_minutes(start, job.update_time)}  {label:11} {state}{note}", flush=True)
                    seen[label] = state
            spot = jobs["spot"]
            if spot.state.value == "JOB_STATE_RUNNING" and preemptions < 2:
                control.preempt(spot.name)
                preemptions += 1
                print(f"  {_minutes(start, client.get_custom_job(spot.name).update_time)}  "
                      f"{'spot':11} preempted by the emulator (the service restarts it)", flush=True)
                continue
            if all(job.is_terminal() for job in jobs.values()):
                break
            time.sleep(0.5)
        print("\n  job          state       queued    ran       restarts")
        for label, job in jobs.items():
            history = control.history(job.name)
            queued = (job.start_time - job.create_time).total_seconds() / 60 if job.start_time else 0
            ran = history["progressSeconds"] / 60
            print(f"  {label:12} {job.state.value.removeprefix('JOB_STATE_'):11} {queued:5.0f} min "
                  f"{ran:5.0f} min  {history['restarts']}")
        stats = control.stats()
        print(f"\n  emulator: {sum(stats['requests'].values())} API requests, "
              f"{stats['preemptions']} preemptions, jobs created {stats['jobsCreated']}")
        ok = all(job.state.value == "JOB_STATE_SUCCEEDED" for job in jobs.values())
        print("\nAll three jobs succeeded." if ok else "\nSome job did not succeed.")
        return 0 if ok else 1
