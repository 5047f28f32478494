"""``airflow-gpu-sched``: the emulator server and the demo.

    airflow-gpu-sched emulator [--host 127.0.0.1] [--port N] [--scenario FILE] [--speed X]
    airflow-gpu-sched demo [--speed X] [--strategies]
    airflow-gpu-sched timeline (--emulator URL | --xcom RESULT.json) [--out timeline.svg]

May import: vertex, emulator, tools; never airflow.
"""

from __future__ import annotations

import argparse
import sys


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

    from airflow_gpu_sched.vertex.timeline import rows_from_result, to_svg

    if args.emulator:
        import requests

        svg = requests.get(f"{args.emulator.rstrip('/')}/emulator/v1/timeline.svg", timeout=30).text
    else:
        with open(args.xcom) as handle:
            result = json.load(handle)
        svg = to_svg(rows_from_result(result), f"training timeline: {result.get('job_name', '')}")
    with open(args.out, "w") as handle:
        handle.write(svg)
    print(f"timeline written to {args.out}")
    return 0


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
    source.add_argument("--xcom", help="a training task's return value (JSON file): one row per attempt")
    timeline.add_argument("--out", default="timeline.svg")
    timeline.set_defaults(func=_timeline)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
