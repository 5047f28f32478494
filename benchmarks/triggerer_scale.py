"""N deferred training jobs in one triggerer event loop: batched (shared poller) vs per-job GETs.

The emulator runs in its own process at real speed; the jobs finish at random (seeded) times
between 1 and 6 intervals after they start. Each mode runs in a fresh process that holds N
``CustomJobTrigger`` s in one asyncio loop, as the triggerer does, and records when each event
arrives. Both modes run in one invocation, on the same job schedule, and print one JSON object:

    {"jobs", "interval_s", "page_parse": {"jobs", "first_ms", "best_ms", "median_ms"},
     "batched": {"api_calls_per_min", "cpu_s_per_min", "peak_rss_mb", "latency_p50_s",
                 "latency_p95_s", "latency_p99_s", "loop_stall_max_s", "loop_stall_p99_s",
                 "loop_stalls_over_airflow_warning", "loop_stalls_over_airflow_warning_at_s",
                 "gc_full_collections_at_s"},
     "per_job": {...}, "api_calls_ratio", "cpu_ratio",        (ratios: batched / per-job measured)
     "api_calls_total_ratio",                                 (batched / per-job, calls to see every job end)
     "loop_stall_max_ratio",                                  (batched / per-job)
     "nominal_per_job_calls_per_min", "api_calls_vs_nominal"} (jobs x 60 / interval; batched / that)

api_calls_per_min: Vertex requests (get + list) the emulator counted, per minute of the run (also
split into lists_per_min and gets_per_min); api_calls: the same, in all. In a tiny run (the
tests' 20 jobs, a few seconds) the per-minute rates are noise: a mode whose process started late
saw most jobs already ended, so the rate ratio swung from 0.75 to 1.58 between two runs; compare
api_calls_total_ratio there. Per-job polling saturates one event loop at 1,000
jobs, so its measured count falls short of its nominal one GET per job per interval: the issue's
target (at most 1 %) is against the nominal figure.
loop_stall_max_s, loop_stall_p99_s: how long the triggers' code held the event loop at a stretch
(a probe sleeping 10 ms, how late it woke: what Airflow's triggerer reports as its loop "blocked";
on a loaded machine the OS not running the process counts too); loop_stalls_over_airflow_warning:
stalls that would make Airflow warn (past 0.1 s: its watchdog's 0.1 s sleep plus the stall passes
its 0.2 s threshold), and each as [s after the triggers started, its length in s];
gc_full_collections_at_s: the full garbage collections the same way (a stall often is one); loop_stall_max_ratio:
batched / per-job. page_parse: the parse of one list page (up to the poller's 500 jobs): the first
(which also builds the validators, once per process), then the best and median of 19 more: the
part of a poll cycle that holds the loop. cpu_s_per_min: CPU seconds of the trigger process per
minute. peak_rss_mb: peak RSS of that process above its idle RSS (after imports, before the
triggers start). latency: event arrival minus the job's endTime.

    python benchmarks/triggerer_scale.py --jobs 1000 --interval 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

import requests

# This checkout's package, not whichever one is installed: the worker and the emulator (``-m``, run
# from the current directory) must be the same code.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PROJECT, LOCATION = "bench", "us-central1"
SCENARIO = {"seed": 1, "speed": 1, "queueSeconds": 0.5, "provisioningSeconds": 2}


def _job(run_seconds: float) -> dict:
    return {"displayName": "scale", "labels": {"managed-by": "airflow-gpu-sched"}, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1",
                          "env": [{"name": "EMULATOR_RUN_SECONDS", "value": f"{run_seconds:.3f}"}]}}]}}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


# ---------------------------------------------------------------- the trigger process


def worker(names: list[str], interval: float, polling: str) -> dict:
    from airflow_gpu_sched.triggers import CustomJobTrigger

    async def main() -> dict:
        idle_rss = _rss_mb()
        cpu0, wall0 = time.process_time(), time.monotonic()
        arrivals: dict[str, tuple[float, str]] = {}

        async def one(name: str) -> None:
            trigger = CustomJobTrigger(name, poll_interval=interval, polling=polling, transient_error_window=300)
            async for event in trigger.run():
                arrivals[name] = (time.time(), event.payload["job"].get("endTime", ""))
                return

        waiting = asyncio.gather(*(one(n) for n in names))
        began = time.monotonic()  # the one origin of the stalls' and the collections' times
        with _full_collections(began) as collections:
            stalls = await _loop_stalls(waiting, began)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        latencies = [at - datetime.fromisoformat(end.replace("Z", "+00:00")).timestamp()
                     for at, end in arrivals.values() if end]
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": round(peak - idle_rss, 1), "latencies": latencies,
                "stalls": stalls, "gc_full": collections}

    return asyncio.run(main())


PROBE_S = 0.01  # the probe's tick: a stall is how late a tick wakes
# Airflow's triggerer (block_watchdog) sleeps 0.1 s and warns "blocked for X seconds" when X, the
# sleep included, passes [triggerer] blocked_main_thread_warning_threshold (0.2): a stall past 0.1 s
AIRFLOW_WARNS_PAST_S = 0.2 - 0.1


@contextlib.contextmanager
def _full_collections(began: float):
    """[s after ``began``, length in s] of each full (generation 2) garbage collection meanwhile:
    the process's whole heap is walked then, and the loop waits."""
    started, found = [0.0], []

    def record(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.monotonic()
        else:
            found.append([round(started[0] - began, 2), round(time.monotonic() - started[0], 3)])

    gc.callbacks.append(record)
    try:
        yield found
    finally:
        gc.callbacks.remove(record)


async def _loop_stalls(waiting: asyncio.Future, began: float) -> list[tuple[float, float]]:
    """(seconds since ``began``, how late a tick woke) for each tick of a probe sleeping PROBE_S,
    until ``waiting`` ends: the time the triggers' code held the event loop at a stretch, which
    Airflow reports as the loop blocked."""
    stalls = []
    while not waiting.done():
        start = time.monotonic()
        await asyncio.sleep(PROBE_S)
        stalls.append((round(start - began, 2), max(0.0, time.monotonic() - start - PROBE_S)))
    await waiting
    return stalls


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------- the driver


def page_parse_ms(jobs: int = 500, repeats: int = 20) -> dict:
    """The in-loop work of one list page: parse a page of ``jobs`` masked jobs (at most the
    poller's page size; the fields of its readMask) as the client does, ``repeats`` times: the
    first, then the best and median of the rest."""
    from airflow_gpu_sched.orchestration.job_types import WATCH_FIELDS
    from airflow_gpu_sched.triggers.poller import PAGE_SIZE
    from airflow_gpu_sched.vertex.models import ListCustomJobsResponse

    job = {"name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1234567890123456789",
           "state": "JOB_STATE_RUNNING", "createTime": "2026-12-04T05:00:00.123456Z",
           "startTime": "2026-12-04T05:01:00Z", "updateTime": "2026-12-04T05:10:00.123456Z",
           "labels": {"managed-by": "airflow-gpu-sched", "dag-id": "nightly", "task-id": "train",
                      "run-id": "scheduled__2026-12-04", "try": "1"}}
    assert set(job) <= set(WATCH_FIELDS)
    size = min(jobs, PAGE_SIZE)
    body = json.dumps({"customJobs": [job] * size, "nextPageToken": "next"})
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ListCustomJobsResponse.model_validate(json.loads(body))
        times.append((time.perf_counter() - start) * 1000)
    # the first parse also builds the models' validators (defer_build: once per process)
    first, rest = times[0], times[1:]
    return {"jobs": size, "first_ms": round(first, 2), "best_ms": round(min(rest), 2),
            "median_ms": round(statistics.median(rest), 2)}


def run_mode(base: str, env: dict, jobs: int, interval: float, polling: str, seed: int) -> dict:
    requests.post(f"{base}/emulator/v1/reset", json=SCENARIO, timeout=30).raise_for_status()
    rng = random.Random(seed)
    session = requests.Session()
    # The worker imports first and says so; only then are the jobs created, so their run times
    # count from a worker ready to poll. (Created before, on a loaded machine every job had ended
    # before the worker's first poll: one call per job in both modes, nothing compared.)
    proc = subprocess.Popen([sys.executable, __file__, "--worker", polling, "--interval", str(interval)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    names = []
    for _ in range(jobs):
        body = _job(rng.uniform(interval, 6 * interval))
        response = session.post(f"{base}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", json=body, timeout=30)
        response.raise_for_status()
        names.append(response.json()["name"])
    before = requests.get(f"{base}/emulator/v1/stats", timeout=30).json()["requests"]
    out, _ = proc.communicate(json.dumps(names))
    if proc.returncode:
        raise RuntimeError(f"the {polling} worker failed ({proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    after = requests.get(f"{base}/emulator/v1/stats", timeout=30).json()["requests"]
    lists, gets = (after.get(k, 0) - before.get(k, 0) for k in ("customJobs.list", "customJobs.get"))
    minutes = result["wall_s"] / 60
    lat = result["latencies"]
    stalls = [stall for _, stall in result["stalls"]]
    warned = [(at, stall) for at, stall in result["stalls"] if stall > AIRFLOW_WARNS_PAST_S]
    return {"api_calls": lists + gets, "api_calls_per_min": round((lists + gets) / minutes, 1),
            "lists_per_min": round(lists / minutes, 1), "gets_per_min": round(gets / minutes, 1), "cpu_s_per_min": round(result["cpu_s"] / minutes, 3),
            "peak_rss_mb": result["peak_rss_mb"], "latency_p50_s": _percentile(lat, 0.5),
            "latency_p95_s": _percentile(lat, 0.95), "latency_p99_s": _percentile(lat, 0.99),
            "events": len(lat), "wall_s": round(result["wall_s"], 1),
            "loop_stall_max_s": round(max(stalls, default=0.0), 3),
            "loop_stall_p99_s": _percentile(stalls or [0.0], 0.99),
            "loop_stalls_over_airflow_warning": len(warned),
            "loop_stalls_over_airflow_warning_at_s": [[at, round(stall, 3)] for at, stall in warned],
            "gc_full_collections_at_s": result["gc_full"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="batched,per_job")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from airflow_gpu_sched.triggers import CustomJobTrigger  # noqa: F401 (imported before "ready")
        # what a triggerer process has loaded before any trigger runs: without them the first
        # connection read imports Airflow's config and API models inside the loop, a stall the
        # probe would charge to the triggers
        import airflow.configuration  # noqa: F401
        import airflow.sdk.api.datamodels._generated  # noqa: F401
        from airflow.sdk import BaseHook  # noqa: F401

        print("ready", flush=True)
        print(json.dumps(worker(json.loads(sys.stdin.read()), args.interval, args.worker)))
        return 0

    home = tempfile.mkdtemp(prefix="scale_airflow_home_")
    emulator = subprocess.Popen([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--port", "0"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        base = emulator.stdout.readline().strip().rsplit(" ", 1)[-1]
        env = {**os.environ, "AIRFLOW_HOME": home, "PYTHONPATH": os.pathsep.join(
                   p for p in (ROOT, os.environ.get("PYTHONPATH")) if p), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(
                   {"conn_type": "google_cloud_platform", "extra": {"project": PROJECT, "api_endpoint": base}})}
        figures: dict = {"jobs": args.jobs, "interval_s": args.interval, "page_parse": page_parse_ms(args.jobs)}
        for mode in args.modes.split(","):
            if not args.json:
                print(f"running {mode} with {args.jobs} jobs ...", file=sys.stderr, flush=True)
            figures[mode] = run_mode(base, env, args.jobs, args.interval, mode, args.seed)
        if "batched" in figures and "per_job" in figures:
            b, p = figures["batched"], figures["per_job"]
            figures["api_calls_ratio"] = round(b["api_calls_per_min"] / max(p["api_calls_per_min"], 1e-9), 4)
            figures["api_calls_total_ratio"] = round(b["api_calls"] / max(p["api_calls"], 1), 4)
            figures["cpu_ratio"] = round(b["cpu_s_per_min"] / max(p["cpu_s_per_min"], 1e-9), 4)
            figures["loop_stall_max_ratio"] = round(b["loop_stall_max_s"] / max(p["loop_stall_max_s"], 1e-9), 4)
        if "batched" in figures:
            nominal = args.jobs * 60 / args.interval  # one GET per job per interval
            figures["nominal_per_job_calls_per_min"] = round(nominal, 1)
            figures["api_calls_vs_nominal"] = round(figures["batched"]["api_calls_per_min"] / nominal, 5)
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)
    print(json.dumps(figures, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
