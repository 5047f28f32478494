"""DAG-parse cost of ``airflow_gpu_sched.operators``: median import time over ``import airflow.sdk``.

Each sample is a fresh interpreter that imports ``airflow.sdk`` and then (or not) the operators
module, timed inside the interpreter; both variants alternate in one run, and the figure is the
difference of the medians; ``ratio_to_sdk`` is the operators' median over ``airflow.sdk``'s (the
target: at most 0.02). The probe imports the operators as a DAG file does, by name.

The package's bytecode is compiled first, as an installed package has it: with
``PYTHONDONTWRITEBYTECODE`` set and a stale ``__pycache__`` (a checkout just edited), every
sample would otherwise compile the changed modules from source and time the compiler.

    python benchmarks/import_cost.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import statistics
import subprocess
import sys

PROBE = """
import time
t0 = time.perf_counter()
import airflow.sdk
t1 = time.perf_counter()
{extra}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def sample(extra: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra)], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[-2]), float(out[-1])


DAG_FILE_IMPORT = ("from airflow_gpu_sched.operators import (FlexStartTrainingOperator, GpuTrainingOperator, "
                   "PersistentResourceTrainingOperator, SpotTrainingOperator)")


def compile_package() -> None:
    package = importlib.util.find_spec("airflow_gpu_sched")  # the package's __init__ is empty
    for folder in package.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_package()
    base, ops, sdk = [], [], []
    for _ in range(args.runs):  # alternate, so machine noise hits both alike
        sdk_s, nothing = sample("pass")
        base.append(nothing)
        sdk.append(sdk_s)
        ops.append(sample(DAG_FILE_IMPORT)[1])
    figures = {"runs": args.runs, "airflow_sdk_ms": round(1000 * statistics.median(sdk), 1),
               "operators_over_sdk_ms": round(1000 * (statistics.median(ops) - statistics.median(base)), 1),
               "ratio_to_sdk": round(statistics.median(ops) / statistics.median(sdk), 4)}
    print(json.dumps(figures) if args.json else "\n".join(f"{k:24} {v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
