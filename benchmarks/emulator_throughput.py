"""How many GET and list requests per second the emulator serves with 1,000 active jobs.

The emulator runs in its own process (as in the demo and the e2e tests); the load comes from
``--load-procs`` asyncio processes, each with a pool of concurrent requests. On a 2-core
machine the load generators compete with the emulator for CPU, so besides requests/s the
benchmark reads the emulator process's own CPU time: ``*_server_cpu_ms`` per request and the
``*_rps_per_server_core`` it implies. Both are compared with what 1,000 jobs polled one GET
each every 10 s need (100 requests/s), as ratios.

    python benchmarks/emulator_throughput.py [--jobs 1000] [--seconds 5] [--concurrency 32] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time

import httpx
import psutil
from concurrent.futures import ProcessPoolExecutor

PARENT = "projects/bench/locations/us-central1"


def _job(i: int) -> dict:
    return {"displayName": f"bench-{i}", "labels": {"bench": "yes", "shard": str(i % 10)},
            "jobSpec": {"workerPoolSpecs": [{
                "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                "containerSpec": {"imageUri": "gcr.io/p/t:1",
                                  "env": [{"name": "EMULATOR_RUN_SECONDS", "value": "100000000"}]}}]}}


async def _hammer(client: httpx.AsyncClient, urls: list[tuple[str, dict]], seconds: float,
                  concurrency: int) -> tuple[int, int]:
    done = errors = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < stop:
            url, params = random.choice(urls)
            response = await client.get(url, params=params)
            done += 1
            errors += response.status_code != 200

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors


async def _load(base: str, urls: list[tuple[str, dict]], seconds: float, concurrency: int) -> tuple[int, int]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"{base}/v1/", limits=limits, timeout=30) as client:
        return await _hammer(client, urls, seconds, concurrency)


def _load_process(base: str, urls: list[tuple[str, dict]], seconds: float, concurrency: int) -> tuple[int, int]:
    return asyncio.run(_load(base, urls, seconds, concurrency))


async def _create_jobs(base: str, count: int) -> list[str]:
    async with httpx.AsyncClient(base_url=f"{base}/v1/", timeout=30) as client:
        names = []
        for i in range(count):
            response = await client.post(f"{PARENT}/customJobs", json=_job(i))
            response.raise_for_status()
            names.append(response.json()["name"])
        return names


def measure(args: argparse.Namespace, base: str, server: psutil.Process) -> dict:
    names = asyncio.run(_create_jobs(base, args.jobs))
    figures: dict = {"jobs": args.jobs, "seconds": args.seconds, "concurrency": args.concurrency,
                     "load_procs": args.load_procs}
    cases = {
        "get": [(n, {}) for n in names],
        "list_page100_label_filter": [(f"{PARENT}/customJobs",
                                       {"pageSize": "100", "filter": 'labels.bench="yes" AND state!="JOB_STATE_SUCCEEDED"'})],
    }
    with ProcessPoolExecutor(args.load_procs) as pool:
        for case, urls in cases.items():
            cpu_before, started = sum(server.cpu_times()[:2]), time.perf_counter()
            results = list(pool.map(_load_process, [base] * args.load_procs, [urls] * args.load_procs,
                                    [args.seconds] * args.load_procs, [args.concurrency] * args.load_procs))
            elapsed = time.perf_counter() - started
            cpu = sum(server.cpu_times()[:2]) - cpu_before
            done = sum(r[0] for r in results)
            figures[f"{case}_rps"] = round(done / elapsed, 1)
            figures[f"{case}_errors"] = sum(r[1] for r in results)
            figures[f"{case}_server_cpu_ms"] = round(1000 * cpu / max(done, 1), 3)
            figures[f"{case}_rps_per_server_core"] = round(done / max(cpu, 1e-9), 1)
    needed = args.jobs / 10.0  # one GET per job every 10 s
    figures["per_job_polling_needs_rps"] = needed
    figures["get_headroom_ratio"] = round(figures["get_rps"] / needed, 2)
    figures["get_headroom_ratio_per_server_core"] = round(figures["get_rps_per_server_core"] / needed, 2)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--load-procs", type=int, default=2, help="load generator processes")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()  # "Vertex AI emulator listening on http://127.0.0.1:PORT"
        base = first.strip().rsplit(" ", 1)[-1]
        figures = measure(args, base, psutil.Process(server.pid))
    finally:
        server.terminate()
        server.wait(timeout=10)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:48} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
