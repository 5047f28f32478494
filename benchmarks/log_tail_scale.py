"""Cloud Logging calls a minute to stream N running jobs' logs: the shared tailer (one
``entries:list`` whose filter ORs the jobs' ids, split at the 20,000-character filter limit) vs
one tail per job, against Cloud Logging's read quota (60 ``entries.list`` a minute per project).

The emulator runs in this process (a thread); N jobs are RUNNING there and log (synthetic
lines: a start line, then a checkpoint a minute). Each mode polls ``--polls`` times, as the
trigger would once per interval; the emulator counts the ``entries.list`` requests (pages
included), and calls per minute = calls per poll x 60 / ``--interval`` (the cadence is the
operators' ``poll_interval``, 30 s by default). One JSON object per run:

    {"interval_s", "quota_per_min": 60,
     "100": {"shared": {"calls_per_poll", "calls_per_min", "share_of_quota"}, "per_job": {...},
             "ratio"},                                   (shared / per-job calls)
     "1000": {...}}

    python benchmarks/log_tail_scale.py --jobs 100 1000 --interval 30 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PROJECT, LOCATION = "bench", "us-central1"


def _job() -> dict:
    return {"displayName": "logs", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1", "env": [{"name": "EMULATOR_RUN_SECONDS", "value": "86400"}]}}]}}


async def _measure(url: str, job_ids: list[str], shared: bool, polls: int) -> int:
    from airflow_gpu_sched.orchestration.log_lines import LogPosition
    from airflow_gpu_sched.triggers.log_tail import SharedLogTailer
    from airflow_gpu_sched.vertex.client import AsyncVertexClient

    async def client() -> AsyncVertexClient:
        return AsyncVertexClient(LOCATION, project=PROJECT, api_endpoint=url)

    groups = [job_ids] if shared else [[job_id] for job_id in job_ids]
    tailers = []
    for index, group in enumerate(groups):
        tailer = SharedLogTailer(("bench", index, PROJECT), client)
        for job_id in group:
            tailer.watch(job_id, 30.0, LogPosition())
        tailer._task.cancel()  # polled by hand below, the same number of times in both modes
        tailers.append(tailer)
    for _ in range(polls):
        for start in range(0, len(tailers), 100):  # at most 100 requests in flight
            await asyncio.gather(*(t.poll_once() for t in tailers[start:start + 100]))
    return sum(t.calls for t in tailers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between polls (poll_interval)")
    parser.add_argument("--polls", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from airflow_gpu_sched.emulator import EmulatorServer
    from airflow_gpu_sched.emulator.control import EmulatorControl
    from airflow_gpu_sched.vertex.client import VertexClient
    from airflow_gpu_sched.vertex.cloud_logging import ENTRIES_LIST_PER_MINUTE, job_id_of

    figures: dict = {"interval_s": args.interval, "quota_per_min": ENTRIES_LIST_PER_MINUTE}
    with EmulatorServer() as server:
        control = EmulatorControl(server.url)
        for jobs in args.jobs:
            control.reset({"seed": 1, "speed": 1, "queueSeconds": 0, "provisioningSeconds": 1})
            with VertexClient(LOCATION, project=PROJECT, api_endpoint=server.url) as vertex:
                ids = [job_id_of(vertex.create_custom_job(_job()).name) for _ in range(jobs)]
            control.advance(130)  # all RUNNING, each with a start line and two checkpoints
            row = {}
            for mode, shared in (("shared", True), ("per_job", False)):
                calls = asyncio.run(_measure(server.url, ids, shared, args.polls))
                per_poll = calls / args.polls
                per_min = per_poll * 60 / args.interval
                row[mode] = {"calls_per_poll": per_poll, "calls_per_min": round(per_min, 1),
                             "share_of_quota": round(per_min / ENTRIES_LIST_PER_MINUTE, 3)}
            row["ratio"] = round(row["shared"]["calls_per_min"] / row["per_job"]["calls_per_min"], 4)
            figures[str(jobs)] = row
    if args.json:
        print(json.dumps(figures))
        return
    print(f"Cloud Logging entries.list calls a minute (poll every {args.interval:g}s; quota "
          f"{ENTRIES_LIST_PER_MINUTE}/min per project)")
    print(f"{'jobs':>6} {'shared':>10} {'per job':>10} {'ratio':>8} {'shared/quota':>13} {'per job/quota':>14}")
    for jobs in args.jobs:
        row = figures[str(jobs)]
        print(f"{jobs:>6} {row['shared']['calls_per_min']:>10} {row['per_job']['calls_per_min']:>10} "
              f"{row['ratio']:>8} {row['shared']['share_of_quota']:>13} {row['per_job']['share_of_quota']:>14}")


if __name__ == "__main__":
    main()
