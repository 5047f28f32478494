"""The same nightly task as a sequential plan and as a hedged race, under one seeded scenario of
scarce, shifting H100 capacity, in one run: time to RUNNING, GPU-hours, cost, jobs created and
cancelled, and the ratios.

The plan: FLEX_START in us-central1, FLEX_START in us-east4 (each ``max_wait_duration=30m``),
SPOT in us-west1 (``capacity_wait_timeout`` of 30 emulated minutes), then STANDARD; sequential (one step at a time, as plans ran before races) and as one race
``{"race": [...]}``. The scenario (drawn from ``--seed``): each region's GPUs for its tier come
and go in windows of emulated time (``capacity`` settings with ``atSeconds``: emulator/scenario.py),
and a window is gone again when its end passes. Both runs replay the same scenario from an
emulator reset, with the operator in ``deferrable=False`` mode (the same trigger loop, in this
process). Times are emulated minutes, read from the jobs' own timestamps (``createTime`` of the
first job to ``startTime`` of the one that trained); GPU-hours and cost are the task's own
estimates (accounting.py), with an illustrative price table, not Google's prices.

    python benchmarks/plan_race.py [--seed N] [--speed X] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.airflow_harness

PROJECT, HOME = "bench-project", "us-central1"
GPU = "NVIDIA_H100_80GB"
REGIONS = (("us-central1", "flexStart"), ("us-east4", "flexStart"), ("us-west1", "spot"))
WAIT_MIN = 30  # each member's wait for capacity, emulated minutes


def plans(speed: float) -> dict[str, list]:
    # FLEX_START's wait is the service's (emulated time); SPOT's is the operator's bound (real seconds)
    members = [{"strategy": "FLEX_START", "max_wait_duration": f"{WAIT_MIN}m", "locations": ["us-central1"]},
               {"strategy": "FLEX_START", "max_wait_duration": f"{WAIT_MIN}m", "locations": ["us-east4"]},
               {"strategy": "SPOT", "locations": ["us-west1"], "capacity_wait_timeout": WAIT_MIN * 60 / speed}]
    last = {"strategy": "STANDARD"}  # on-demand, never short in this scenario: every run ends
    return {"sequential": [*members, last], "race": [{"race": members}, last]}
PRICES = {"currency": "USD", GPU: {"FLEX_START": 4.0, "SPOT": 2.5, "STANDARD": 9.0}}  # illustrative, per GPU-hour


def windows(seed: int) -> dict[str, tuple[int, int]]:
    """Per region, the emulated minutes [from, to) during which its tier has 8 free H100s."""
    rng = random.Random(seed)
    found = {}
    for region, _ in REGIONS:
        start = rng.randrange(15, 80, 5)
        found[region] = (start, start + rng.randrange(20, 60, 5))
    return found


def scenario(seed: int, speed: float) -> dict:
    capacity = []
    for region, tier in REGIONS:
        start, end = windows(seed)[region]
        capacity += [{"location": region, "acceleratorType": GPU, tier: 0},
                     {"location": region, "acceleratorType": GPU, tier: 8, "atSeconds": start * 60},
                     {"location": region, "acceleratorType": GPU, tier: 0, "atSeconds": end * 60}]
    return {"seed": seed, "speed": speed, "queueSeconds": 1, "provisioningSeconds": 120, "cancelSeconds": 10,
            "capacity": capacity}


def run_plan(url: str, plan: list, control, story: dict) -> dict:
    from airflow_gpu_sched.operators import GpuTrainingOperator
    from airflow_gpu_sched.vertex.client import VertexClient

    op = GpuTrainingOperator(
        task_id="nightly", project_id=PROJECT, location=HOME, deferrable=False, poll_interval=0.1,
        image_uri="gcr.io/p/trainer:1", machine_type="a3-highgpu-8g", accelerator_type=GPU, accelerator_count=8,
        env={"EMULATOR_RUN_SECONDS": "1800"}, quota_preflight=False, prices=PRICES, plan=plan)
    op.validated_job({})  # warm (models, validators, clients): the capacity story starts with the task
    list(op.client(HOME).list_custom_jobs())
    control.reset(story)  # the same capacity story for both, from now
    started = time.monotonic()
    result = op.execute({})
    jobs = [j for region in ("us-central1", "us-east4", "us-west1")
            for j in VertexClient(location=region, project=PROJECT, api_endpoint=url).list_custom_jobs()]
    first = min(j.create_time for j in jobs)
    winner = next(j for j in jobs if j.name == result["job_name"])
    return {"time_to_running_min": round((winner.start_time - first).total_seconds() / 60, 1),
            "winner": f"{winner.job_spec.strategy.value} {winner.name.split('/')[3]}",
            "gpu_hours": result["gpu_hours"], "cost": result["cost"],
            "hedging_gpu_hours": (result.get("hedging") or {}).get("gpu_hours", 0.0),
            "jobs_created": len(jobs), "jobs_cancelled": sum(1 for j in jobs if j.state.value == "JOB_STATE_CANCELLED"),
            "wall_seconds": round(time.monotonic() - started, 1)}


def measure(seed: int, speed: float) -> dict:
    from tests.airflow_harness import set_airflow_env

    set_airflow_env(tempfile.mkdtemp(prefix="airflow_home_"))
    from airflow_gpu_sched.emulator import EmulatorServer
    from airflow_gpu_sched.emulator.control import EmulatorControl

    figures: dict = {"seed": seed, "windows_min": windows(seed)}
    with EmulatorServer() as server:
        os.environ["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": server.url}})
        control = EmulatorControl(server.url)
        for mode, plan in plans(speed).items():
            figures[mode] = run_plan(server.url, plan, control, scenario(seed, speed))
    seq, race = figures["sequential"], figures["race"]
    figures["time_to_running_ratio"] = round(seq["time_to_running_min"] / max(race["time_to_running_min"], 0.1), 2)
    figures["gpu_hours_ratio"] = round(race["gpu_hours"] / max(seq["gpu_hours"], 1e-9), 3)
    figures["cost_ratio"] = round(race["cost"] / max(seq["cost"], 1e-9), 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--speed", type=float, default=300.0, help="emulated seconds per real second")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = parser.parse_args()
    figures = measure(args.seed, args.speed)
    print(f"capacity windows (emulated minutes, 8 H100s): " + ", ".join(
        f"{region} {tier} {w[0]}-{w[1]}" for (region, tier), w in zip(REGIONS, figures["windows_min"].values())))
    print(f"{'':26} {'sequential':>14} {'race':>14}")
    for key in ("winner", "time_to_running_min", "gpu_hours", "hedging_gpu_hours", "cost", "jobs_created",
                "jobs_cancelled", "wall_seconds"):
        print(f"{key:26} {str(figures['sequential'][key]):>14} {str(figures['race'][key]):>14}")
    print(f"time to RUNNING, sequential / race: {figures['time_to_running_ratio']}x; GPU-hours race / sequential: "
          f"{figures['gpu_hours_ratio']}; cost race / sequential: {figures['cost_ratio']}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
