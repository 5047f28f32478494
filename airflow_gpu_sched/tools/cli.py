"""``airflow-gpu-sched``: the emulator server, the demo, the timeline and the platform team's
commands (``jobs``, ``plan``, ``quota``; also under ``airflow gpu-sched``, tools/airflow_cli.py).

:data:`DESCRIPTION` is what ``--help`` shows; this docstring is for readers of the code. Every
command runs inside :func:`reported`, the one error handler (tools/exit_codes.py: which
exception is which exit code).

May import: vertex, drawing, orchestration, emulator, tools; never airflow.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airflow_gpu_sched import DOCS_URL, __version__, docs_page
from airflow_gpu_sched.tools.exit_codes import BUG, INTERRUPTED, ApiError, UsageError, classify
from airflow_gpu_sched.tools.output import OUTPUT_ARGS, emit, printable

DESCRIPTION = """\
Run GPU training on scarce Vertex AI capacity from Airflow: the local Vertex AI emulator, the
demo, a timeline of training jobs, and commands to inspect jobs, plans and quotas.

  airflow-gpu-sched emulator                      serve a local Vertex AI on http://127.0.0.1:8765
  airflow-gpu-sched demo                          run the seven example DAGs against the emulator
  airflow-gpu-sched jobs list --location L        list this package's training jobs in a region
  airflow-gpu-sched jobs orphans --location L     find (--cancel: cancel) jobs whose task is gone
  airflow-gpu-sched plan check DAG_FILE           show each training task's plan, check its rules
  airflow-gpu-sched quota check DAG_FILE          compare each task's GPUs with the regions' quota
  airflow-gpu-sched timeline --emulator URL       draw the training jobs' timeline as an SVG

The jobs, plan and quota commands run where Airflow is configured (on Airflow 3.2 and later
the same commands are `airflow gpu-sched ...`); they read Vertex AI through the connection --conn-id (default
google_cloud_default). Listings print a table; -o json|yaml|plain for scripts.
"""

EPILOG = f"""\
exit codes: 0 ok; 1 findings (a rule broken, a quota too low, orphans left); 2 usage (bad
argument or file, missing connection); 3 API or connection error; 4 a bug (please report);
130 interrupted.
documentation: {DOCS_URL} (this command line: {docs_page("cli")})
"""


def _emulator(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.emulator import EmulatorServer, Scenario

    scenario = Scenario.load(args.scenario) if args.scenario else Scenario()
    if args.speed is not None:
        scenario = scenario.model_copy(update={"speed": args.speed})
    if args.execute:
        scenario = scenario.model_copy(update={"execute": True, "execute_root": args.execute_root,
                                               "execute_workdir": args.workdir})
    if scenario.execute and args.allow_remote:  # --execute, or a --scenario file saying execute
        raise UsageError("--execute runs commands from job specs: loopback only")
    token = None
    if args.control_token:
        import secrets

        token = secrets.token_urlsafe(24)
    try:
        server = EmulatorServer(scenario, host=args.host, port=args.port, allow_remote=args.allow_remote,
                                control_token=token)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"Vertex AI emulator listening on {server.url}", flush=True)
    print(f"  api_endpoint for clients: {server.url}   (speed x{scenario.speed:g})", flush=True)
    print(f"  control API: {server.url}/emulator/v1/stats", flush=True)
    if token:
        print(f"  control token (header X-Emulator-Control-Token; EmulatorControl(url, control_token=...)): "
              f"{token}", flush=True)
    server.serve_forever()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools.demo import run_demo, run_nightly_demo

    if args.strategies:
        return run_demo(speed=args.speed)
    return run_nightly_demo(speed=args.speed)


def _timeline(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.drawing.timeline_svg import svg as draw

    svg = _emulator_svg(args.emulator) if args.emulator else draw([_xcom_night(args)], "training timeline")
    with open(args.out, "w") as handle:  # only once the drawing is in hand: no error page saved as the SVG
        handle.write(svg)
    print(f"timeline written to {args.out}")
    return 0


def _emulator_svg(base_url: str) -> str:
    import requests

    from airflow_gpu_sched.tools.exit_codes import unreachable

    url = f"{base_url.rstrip('/')}/emulator/v1/timeline.svg"
    try:
        response = requests.get(url, timeout=30)
    except requests.RequestException as exc:
        raise ApiError(unreachable(url, str(exc), waited=True)) from None
    kind = response.headers.get("Content-Type", "")
    if response.status_code != 200 or not kind.startswith("image/svg+xml"):
        raise ApiError(f"{url} answered HTTP {response.status_code} ({kind or 'no content type'}), not a "
                       "timeline: is --emulator the emulator's base URL?")
    return response.text


def _xcom_night(args: argparse.Namespace) -> Any:
    import json

    from airflow_gpu_sched.drawing.timeline import night_from_results

    with open(args.xcom) as handle:
        try:
            result = json.load(handle)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{args.xcom}: not valid JSON: {exc}") from None
    if not isinstance(result, dict):
        raise UsageError(f"{args.xcom}: expected a task's return value (an object), got {type(result).__name__}")
    # one task's return value, or {task_id: return value} for several tasks of a run
    results = [(args.task, result)] if "attempts" in result else list(result.items())
    try:
        return night_from_results(args.title or args.xcom, results)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise UsageError(f"{args.xcom}: not a training task's return value (nor an object of task id -> "
                         f"return value): {type(exc).__name__}: {exc}") from None


def _client(args: argparse.Namespace, location: str | None = None):
    from airflow_gpu_sched.tools import platform

    return platform.make_client(args.conn_id, location or args.location, args.project, args.api_endpoint,
                                wait=args.wait)


def reported(func: Any) -> Any:
    """The one error handler: an error the user can act on is one ``error:`` line and its exit code
    (tools/exit_codes.py), not a traceback; a bug keeps its traceback, exit 4."""
    def command(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return INTERRUPTED
        except Exception as exc:
            verdict = classify(exc, waited=getattr(args, "wait", False))
            if verdict is None:
                import traceback

                traceback.print_exc()
                print(f"error: an unexpected {type(exc).__name__}: a bug in airflow-gpu-sched {__version__}, "
                      "please report it with the traceback above", file=sys.stderr)
                return BUG
            code, message = verdict  # it may quote an endpoint's words: escaped, its line breaks kept
            print("error: " + "\n".join(printable(line) for line in message.split("\n")), file=sys.stderr)
            return code

    command.__name__ = func.__name__
    return command


def _job_types(args: argparse.Namespace) -> list:
    from airflow_gpu_sched.orchestration.job_types import get_job_type

    return [get_job_type(key) for key in (args.job_type or JOB_TYPES)]


JOB_COLUMNS = ["dag", "task", "map_index", "try_number", "strategy", "state", "created", "started", "ended", "job_type",
               "deployment", "name"]
ORPHAN_COLUMNS = ["dag", "task", "map_index", "run", "state", "owner", "deployment", "why", "name"]


def _jobs_list(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from airflow_gpu_sched.tools import platform

    rows = platform.list_jobs(_client(args), _job_types(args))
    if args.output == "table" and not args.wide:  # for a terminal: 120 columns at most
        emit(platform.short_job_rows(rows, datetime.now(timezone.utc)), list(platform.SHORT_JOB_COLUMNS), "table")
    else:
        emit(rows, JOB_COLUMNS, args.output)
    return 0


def _jobs_orphans(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    mine = platform.this_deployment()
    client = _client(args)
    jobs = [job for job in platform.list_jobs(client, _job_types(args)) if job.active]
    tis = platform.read_task_instances({job.dag for job in jobs if job.dag})
    orphans = platform.find_orphans(jobs, tis, mine)
    emit(platform.orphan_rows(orphans), ORPHAN_COLUMNS, args.output)
    if foreign := [o for o in orphans if not o.cancellable]:
        print(f"{len(foreign)} of these job(s) belong to another deployment or to none known: never cancelled "
              f"here (this deployment is {mine or 'not known yet: no job submitted with its id'}: "
              f"[gpu_sched] deployment_id or the Variable airflow_gpu_sched_deployment_id, {docs_page('reaper')})",
              file=sys.stderr)
    own = [o for o in orphans if o.cancellable]
    if not args.cancel or not own:
        return 0
    if not args.yes:
        print(f"Cancel {len(own)} job(s) of this deployment? [y/N] ", end="", flush=True, file=sys.stderr)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing cancelled", file=sys.stderr)
            return 1
    for orphan in own:
        print(printable(platform.cancel_job(client, orphan.job.name)), file=sys.stderr)
    return 0


def _plan_check(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    tasks = platform.training_tasks(args.dag_file)
    rows = [row for task in tasks for row in platform.plan_rows(task)]
    emit(rows, ["dag", "task", "position", "step", "regions", "rules", "violations", "cost"], args.output)
    return 1 if any(row.violations for row in rows) else 0


def _quota_check(args: argparse.Namespace) -> int:
    from airflow_gpu_sched.tools import platform

    if args.dag_file is None:  # the region's GPU quotas, no DAG
        if not args.location:
            raise UsageError("quota check: give a DAG_FILE, or --location for the region's GPU quotas")
        rows = platform.region_quota_rows(_client(args), args.project, args.location)
        emit(rows, ["metric", "region", "limit"], args.output)
        return 0
    tasks = platform.training_tasks(args.dag_file)
    clients: dict = {}

    def client_for(region: str):
        if region not in clients:
            clients[region] = _client(args, region)  # the DAG's regions, not --location
        return clients[region]

    rows = [row for task in tasks for row in platform.quota_rows(task, client_for, args.project)]
    emit(rows, ["dag", "task", "step", "region", "metric", "need", "limit", "verdict"], args.output)
    return 1 if any(row.verdict.startswith("TOO LOW") for row in rows) else 0


JOB_TYPES = ["custom_job", "hyperparameter_tuning_job", "training_pipeline"]
# (flags, argparse keywords) once, for both trees: this one and `airflow gpu-sched ...`.
_CONNECTION = [(("--conn-id",), {"default": "google_cloud_default",
                                  "help": "the Airflow connection to Google Cloud (default: google_cloud_default)"}),
               (("--api-endpoint",), {"help": "another endpoint than the connection's, e.g. the emulator's URL"}),
               (("--project",), {"help": "the Google Cloud project (default: the connection's)"}),
               (("--wait",), {"action": "store_true",
                              "help": "retry an unreachable or overloaded endpoint for up to 20 s (default: fail "
                                      "at once)"})]
_LOCATION = [(("--location",), {"required": True, "help": "the region, e.g. us-central1"})]
_OUTPUT = OUTPUT_ARGS  # -o/--output table|json|yaml|plain, and the deprecated --json
_JOB_TYPE = [(("--job-type",), {"action": "append", "choices": JOB_TYPES, "help": "only these (repeatable)"})]
_DAG_FILE = [(("dag_file",), {"help": "a DAG file (loaded with Airflow's DagBag)"})]
# group -> command -> (function, help, arguments)
PLATFORM_COMMANDS: dict[str, tuple[str, dict[str, tuple[Any, str, list]]]] = {
    "jobs": ("list and clean up this package's Vertex AI jobs in a project and region", {
        "list": (_jobs_list, "list the jobs this package submitted (label managed-by=airflow-gpu-sched): DAG, "
                          "task, try, strategy, state, age; --wide for every column",
                 _CONNECTION + _LOCATION + _JOB_TYPE + _OUTPUT + [
                     (("--wide",), {"action": "store_true",
                                    "help": "the table with every column: full names, times, run, type"})]),
        "orphans": (_jobs_orphans, "find active jobs whose task instance is no longer running or deferred; "
                                    "--cancel cancels this deployment's",
                    _CONNECTION + _LOCATION + _JOB_TYPE + _OUTPUT + [
                        (("--cancel",), {"action": "store_true", "help": "cancel them (asks first)"}),
                        (("--yes",), {"action": "store_true", "help": "with --cancel: do not ask"})]),
    }),
    "plan": ("check the capacity plans of a DAG file's training tasks", {
        "check": (_plan_check, "show each training task's plan (steps, regions in order) and check every step "
                              "against Vertex AI's rules; exit 1 on a violation",
                  _DAG_FILE + _OUTPUT)}),
    "quota": ("compare training tasks' GPUs with the regions' GPU quota", {
        "check": (_quota_check, "compare what each training task holds at once with its regions' GPU quota "
                               "(without DAG_FILE: list --location's GPU quotas); exit 1 when too low",
                  [(("dag_file",), {"nargs": "?", "help": "a DAG file (without one: --location's GPU quotas)"}),
                   *_CONNECTION, (("--location",), {"help": "without DAG_FILE: the region"}), *_OUTPUT])}),
}


def _platform_commands(sub: Any) -> None:
    for group, (group_help, commands) in PLATFORM_COMMANDS.items():
        group_parser = sub.add_parser(group, help=group_help)
        group_sub = group_parser.add_subparsers(dest=f"{group}_command", required=True)
        for name, (func, help_text, arguments) in commands.items():
            command = group_sub.add_parser(name, help=help_text, description=help_text)
            for flags, options in arguments:
                command.add_argument(*flags, **options)
            command.set_defaults(func=reported(_logs_on_stderr(func)))


def _logs_on_stderr(func: Any) -> Any:
    def command(args: argparse.Namespace) -> int:
        from airflow_gpu_sched.tools import platform

        restore = platform.logs_to_stderr()  # before anything logs: stdout carries the rows only
        try:
            return func(args)
        finally:
            restore()

    command.__name__ = func.__name__
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-gpu-sched", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"airflow-gpu-sched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    emulator = sub.add_parser("emulator", help="serve a local Vertex AI (the emulator) over HTTP, with a "
                                               "dashboard at its root URL")
    emulator.add_argument("--host", default="127.0.0.1", help="loopback by default")
    emulator.add_argument("--port", type=int, default=8765, help="default 8765; 0 picks a free port")
    emulator.add_argument("--scenario", help="JSON or YAML scenario file")
    emulator.add_argument("--speed", type=float, help="emulated seconds per real second")
    emulator.add_argument("--execute", action="store_true",
                          help="run each RUNNING job's command as a local process (loopback only; off by default)")
    emulator.add_argument("--execute-root", help="with --execute: where gs:// paths and logs go")
    emulator.add_argument("--workdir", help="with --execute: the processes' working directory")
    emulator.add_argument("--allow-remote", action="store_true",
                          help="allow a non-loopback --host and any Host header (the emulator has no "
                               "authentication; never with --execute)")
    emulator.add_argument("--control-token", action="store_true",
                          help="the control API (/emulator/v1/...) needs a token made for this run, "
                               "printed at start (header X-Emulator-Control-Token)")
    emulator.set_defaults(func=reported(_emulator))

    demo = sub.add_parser("demo", help="run the seven example DAGs (nightly, SPOT, persistent resource, tuned, "
                                       "deploy, race and its sequential twin) with `airflow dags test` against "
                                       "the emulator, and summarise each")
    demo.add_argument("--speed", type=float, default=120.0, help="emulated seconds per real second")
    demo.add_argument("--strategies", action="store_true",
                      help="instead: one job of each strategy, submitted with the client, life cycles printed")
    demo.set_defaults(func=reported(_demo))

    timeline = sub.add_parser("timeline", help="write a timeline SVG from an emulator or a task's XCom result")
    source = timeline.add_mutually_exclusive_group(required=True)
    source.add_argument("--emulator", help="the emulator's base URL: every job it holds")
    source.add_argument("--xcom", help="a training task's return value (JSON file), or an object of task id -> "
                                       "return value: one row per task and attempt")
    timeline.add_argument("--task", default="train", help="with --xcom of one return value: the task's name")
    timeline.add_argument("--title", help="with --xcom: the night's title (default: the file name)")
    timeline.add_argument("--out", default="timeline.svg", help="the SVG file to write (default: timeline.svg)")
    timeline.set_defaults(func=reported(_timeline))
    _platform_commands(sub)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
