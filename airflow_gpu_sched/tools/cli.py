"""``airflow-gpu-sched``: the emulator server, the demo, and the platform team's commands.

    airflow-gpu-sched emulator [--host 127.0.0.1] [--port N] [--scenario FILE] [--speed X]
    airflow-gpu-sched demo [--speed X] [--strategies]
    airflow-gpu-sched timeline (--emulator URL | --xcom RESULT.json [--task T] [--title T]) [--out timeline.svg]
    airflow-gpu-sched jobs list --project P --location L [--job-type T ...] [--json]
    airflow-gpu-sched jobs orphans --project P --location L [--cancel [--yes]] [--json]
    airflow-gpu-sched plan check DAG_FILE [--json]
    airflow-gpu-sched quota check (DAG_FILE | --location L) [--project P] [--json]

The jobs, plan and quota commands need Airflow (a connection, the metadata DB, DagBag); the
connection is ``--conn-id`` (default ``google_cloud_default``).

May import: vertex, orchestration, emulator, tools; never airflow.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _emulator(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.emulator import EmulatorServer, Scenario

    scenario = Scenario.load(args.scenario) if args.scenario else Scenario()
    if args.speed is not None:
        scenario = scenario.model_copy(update={"speed": args.speed})
    if args.execute:
        scenario = scenario.model_copy(update={"execute": True, "execute_root": args.execute_root,
                                               "execute_workdir": args.workdir})
    if args.execute and args.allow_remote:
        print("error: --execute runs commands from job specs: loopback only", file=sys.stderr)
        return 2
    try:
        server = EmulatorServer(scenario, host=args.host, port=args.port, allow_remote=args.allow_remote)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Vertex AI emulator listening on {server.url}", flush=True)
    print(f"  api_endpoint for clients: {server.url}   (speed x{scenario.speed:g})", flush=True)
    print(f"  control API: {server.url}/emulator/v1/stats", flush=True)
    server.serve_forever()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools.demo import run_demo, run_nightly_demo

    if args.strategies:
        return run_demo(speed=args.speed)
    return run_nightly_demo(speed=args.speed)


def _timeline(args: argparse.Namespace) -> int:
    import json

    from airflow_gpu_sched.vertex.timeline import night_from_results
    from airflow_gpu_sched.vertex.timeline import svg as draw

    if args.emulator:
        import requests

        svg = requests.get(f"{args.emulator.rstrip('/')}/emulator/v1/timeline.svg", timeout=30).text
    else:
        with open(args.xcom) as handle:
            result = json.load(handle)
        # one task's return value, or {task_id: return value} for several tasks of a run
        results = [(args.task, result)] if "attempts" in result else list(result.items())
        svg = draw([night_from_results(args.title or args.xcom, results)], "training timeline")
    with open(args.out, "w") as handle:
        handle.write(svg)
    print(f"timeline written to {args.out}")
    return 0


def _client(args: argparse.Namespace, location: str | None = None):
    from airflow_gpu_sched.tools import platform

    return platform.make_client(args.conn_id, location or args.location, args.project, args.api_endpoint)


def _reported(func: Any) -> Any:
    """Errors the user can act on as one ``error:`` line and exit code 2, not a traceback."""
    def command(args: argparse.Namespace) -> int:
        from airflow_gpu_sched.tools.platform import CommandError
        from airflow_gpu_sched.vertex.client import VertexError

        try:
            return func(args)
        except (CommandError, VertexError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    command.__name__ = func.__name__
    return command


def _job_types(args: argparse.Namespace) -> list:
    from airflow_gpu_sched.orchestration.job_types import get_job_type

    return [get_job_type(key) for key in (args.job_type or JOB_TYPES)]


JOB_COLUMNS = ["dag", "task", "map_index", "try_number", "strategy", "state", "created", "started", "ended", "job_type",
               "name"]


def _jobs_list(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    platform.emit(platform.list_jobs(_client(args), _job_types(args)), JOB_COLUMNS, args.json)
    return 0


def _jobs_orphans(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    client = _client(args)
    jobs = [job for job in platform.list_jobs(client, _job_types(args)) if job.active]
    tis = platform.read_task_instances({job.dag for job in jobs if job.dag})
    orphans = platform.find_orphans(jobs, tis)
    rows = [{**platform.asdict(o.job), "why": o.why} for o in orphans]
    platform.emit(rows, ["dag", "task", "map_index", "run", "state", "why", "name"], args.json)
    if not args.cancel or not orphans:
        return 0
    if not args.yes:
        print(f"Cancel {len(orphans)} job(s)? [y/N] ", end="", flush=True, file=sys.stderr)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing cancelled", file=sys.stderr)
            return 1
    for orphan in orphans:
        print(platform.cancel_job(client, orphan.job.name), file=sys.stderr)
    return 0


def _tasks(args: argparse.Namespace) -> list | None:
    from airflow_gpu_sched.tools import platform

    try:
        return platform.training_tasks(args.dag_file)
    except ValueError as exc:
        print(f"error: {args.dag_file}: {exc}", file=sys.stderr)
        return None


def _plan_check(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    tasks = _tasks(args)
    if tasks is None:
        return 2
    rows = [row for task in tasks for row in platform.plan_rows(task)]
    platform.emit(rows, ["dag", "task", "position", "step", "regions", "rules", "violations"], args.json)
    return 1 if any(row.violations for row in rows) else 0


def _quota_check(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    if args.dag_file is None:  # the region's GPU quotas, no DAG
        if not args.location:
            print("error: quota check: give a DAG_FILE, or --location for the region's GPU quotas", file=sys.stderr)
            return 2
        rows = platform.region_quota_rows(_client(args), args.project, args.location)
        platform.emit(rows, ["metric", "region", "limit"], args.json)
        return 0
    tasks = _tasks(args)
    if tasks is None:
        return 2
    clients: dict = {}

    def client_for(region: str):
        if region not in clients:
            clients[region] = _client(args, region)  # the DAG's regions, not --location
        return clients[region]

    rows = [row for task in tasks for row in platform.quota_rows(task, client_for, args.project)]
    platform.emit(rows, ["dag", "task", "step", "region", "metric", "need", "limit", "verdict"], args.json)
    return 1 if any(row.verdict.startswith("TOO LOW") for row in rows) else 0


JOB_TYPES = ["custom_job", "hyperparameter_tuning_job", "training_pipeline"]
# (flags, argparse keywords) once, for both trees: this one and `airflow gpu-sched ...`.
_CONNECTION = [(("--conn-id",), {"default": "google_cloud_default", "help": "the google_cloud_platform connection"}),
               (("--api-endpoint",), {"help": "override the connection's endpoint (e.g. the emulator's URL)"}),
               (("--project",), {"help": "the project (default: the connection's)"})]
_LOCATION = [(("--location",), {"required": True, "help": "the region, e.g. us-central1"})]
_JSON = [(("--json",), {"action": "store_true", "help": "JSON for machines instead of a table"})]
_JOB_TYPE = [(("--job-type",), {"action": "append", "choices": JOB_TYPES, "help": "only these (repeatable)"})]
_DAG_FILE = [(("dag_file",), {"help": "a DAG file (loaded with Airflow's DagBag)"})]
# group -> command -> (function, help, arguments)
PLATFORM_COMMANDS: dict[str, tuple[str, dict[str, tuple[Any, str, list]]]] = {
    "jobs": ("this package's Vertex AI jobs in a project and region", {
        "list": (_jobs_list, "jobs labelled managed-by=airflow-gpu-sched: DAG, task, try, strategy, state, times",
                 _CONNECTION + _LOCATION + _JOB_TYPE + _JSON),
        "orphans": (_jobs_orphans, "active jobs whose task instance is no longer running or deferred",
                    _CONNECTION + _LOCATION + _JOB_TYPE + _JSON + [
                        (("--cancel",), {"action": "store_true", "help": "cancel them (asks first)"}),
                        (("--yes",), {"action": "store_true", "help": "with --cancel: do not ask"})]),
    }),
    "plan": ("training tasks' plans", {
        "check": (_plan_check, "each training task's plan: steps, regions, the rules each step is checked against",
                  _DAG_FILE + _JSON)}),
    "quota": ("training tasks' GPU quota", {
        "check": (_quota_check, "what each training task needs at once against its regions' quotas",
                  [(("dag_file",), {"nargs": "?", "help": "a DAG file (without one: --location's GPU quotas)"}),
                   *_CONNECTION, (("--location",), {"help": "without DAG_FILE: the region"}), *_JSON])}),
}


def _platform_commands(sub: Any) -> None:
    for group, (group_help, commands) in PLATFORM_COMMANDS.items():
        group_parser = sub.add_parser(group, help=group_help)
        group_sub = group_parser.add_subparsers(dest=f"{group}_command", required=True)
        for name, (func, help_text, arguments) in commands.items():
            command = group_sub.add_parser(name, help=help_text, description=help_text)
            for flags, options in arguments:
                command.add_argument(*flags, **options)
            command.set_defaults(func=_reported(func))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-gpu-sched", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    emulator = sub.add_parser("emulator", help="serve the local Vertex AI emulator")
    emulator.add_argument("--host", default="127.0.0.1", help="loopback by default")
    emulator.add_argument("--port", type=int, default=8765)
    emulator.add_argument("--scenario", help="JSON or YAML scenario file")
    emulator.add_argument("--speed", type=float, help="emulated seconds per real second")
    emulator.add_argument("--execute", action="store_true",
                          help="run each RUNNING job's command as a local process (loopback only; off by default)")
    emulator.add_argument("--execute-root", help="with --execute: where gs:// paths and logs go")
    emulator.add_argument("--workdir", help="with --execute: the processes' working directory")
    emulator.add_argument("--allow-remote", action="store_true",
                          help="allow a non-loopback --host (the emulator has no authentication)")
    emulator.set_defaults(func=_emulator)

    demo = sub.add_parser("demo", help="run the nightly_retraining example DAG against the emulator")
    demo.add_argument("--speed", type=float, default=120.0, help="emulated seconds per real second")
    demo.add_argument("--strategies", action="store_true",
                      help="instead: one job of each strategy, submitted with the client, life cycles printed")
    demo.set_defaults(func=_demo)

    timeline = sub.add_parser("timeline", help="write a timeline SVG from an emulator or a task's XCom result")
    source = timeline.add_mutually_exclusive_group(required=True)
    source.add_argument("--emulator", help="the emulator's base URL: every job it holds")
    source.add_argument("--xcom", help="a training task's return value (JSON file), or an object of task id -> "
                                       "return value: one row per task and attempt")
    timeline.add_argument("--task", default="train", help="with --xcom of one return value: the task's name")
    timeline.add_argument("--title", help="with --xcom: the night's title (default: the file name)")
    timeline.add_argument("--out", default="timeline.svg")
    timeline.set_defaults(func=_timeline)
    _platform_commands(sub)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
