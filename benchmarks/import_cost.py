"""DAG-parse cost of ``airflow_gpu_sched.operators``: median import time over ``import airflow.sdk``.

Each sample is a fresh interpreter that imports ``airflow.sdk`` and then (or not) the operators
module, timed inside the interpreter; both variants alternate in one run, and the figure is the
difference of the medians; ``ratio_to_sdk`` is the operators' median over ``airflow.sdk``'s (the
target: at most 0.02). The probe imports the operators as a DAG file does, by name.

The package's bytecode is compiled first, as an installed package has it: with
``PYTHONDONTWRITEBYTECODE`` set and a stale ``__pycache__`` (a checkout just edited), every
sample would otherwise compile the changed modules from source and time the compiler.

    python benchmarks/import_cost.py [--runs 15] [--json] [--against /path/to/other/checkout]

``--against`` times another checkout's package in the same run (its samples alternate with
this one's, so machine noise hits both alike): the figures of both, side by side.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # this checkout

PROBE = """
import time
t0 = time.perf_counter()
import airflow.sdk
t1 = time.perf_counter()
{extra}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def sample(extra: str, root: Path | None = None) -> tuple[float, float]:
    """(seconds of ``import airflow.sdk``, seconds of ``extra`` after it); ``root``: the checkout
    whose package is imported (first on the path), else whichever the interpreter finds."""
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    # in ``root`` too: ``python -c`` puts the working directory first on the path
    out = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra)], capture_output=True, text=True,
                         check=True, env=env, cwd=root).stdout.split()
    return float(out[-2]), float(out[-1])


DAG_FILE_IMPORT = ("from airflow_gpu_sched.operators import (FlexStartTrainingOperator, GpuTrainingOperator, "
                   "PersistentResourceTrainingOperator, SpotTrainingOperator)")


def compile_package(root: Path | None = None) -> None:
    if root is not None:
        compileall.compile_dir(str(root / "airflow_gpu_sched"), quiet=1)
        return
    package = importlib.util.find_spec("airflow_gpu_sched")  # the package's __init__ is empty
    for folder in package.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def figures(runs: int, sdk: list[float], base: list[float], ops: list[float]) -> dict[str, float]:
    return {"runs": runs, "airflow_sdk_ms": round(1000 * statistics.median(sdk), 1),
            "operators_over_sdk_ms": round(1000 * (statistics.median(ops) - statistics.median(base)), 1),
            "ratio_to_sdk": round(statistics.median(ops) / statistics.median(sdk), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--against", type=Path, help="another checkout, timed side by side in the same run")
    args = parser.parse_args()
    if args.against is None:
        compile_package()
        base, ops, sdk = [], [], []
        for _ in range(args.runs):  # alternate, so machine noise hits both alike
            sdk_s, nothing = sample("pass")
            base.append(nothing)
            sdk.append(sdk_s)
            ops.append(sample(DAG_FILE_IMPORT)[1])
        found = figures(args.runs, sdk, base, ops)
        print(json.dumps(found) if args.json else "\n".join(f"{k:24} {v}" for k, v in found.items()))
        return 0
    roots = {"this": HERE, "against": args.against.resolve()}
    for root in roots.values():
        compile_package(root)
    sdk, base, ops = [], [], {name: [] for name in roots}
    for _ in range(args.runs):
        sdk_s, nothing = sample("pass", HERE)
        sdk.append(sdk_s)
        base.append(nothing)
        for name, root in roots.items():
            ops[name].append(sample(DAG_FILE_IMPORT, root)[1])
    found = {name: {"root": str(root), **figures(args.runs, sdk, base, ops[name])} for name, root in roots.items()}
    print(json.dumps(found) if args.json else "\n".join(
        f"{name:8} {k:24} {v}" for name, values in found.items() for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
