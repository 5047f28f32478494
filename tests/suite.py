"""``make check`` and ``make test``: the suite as pytest runs, one after the other (docs/testing.md).

* ``check``: every test that starts no Airflow deployment (``not e2e``), on pytest-xdist workers:
  each worker has its own emulator, AIRFLOW_HOME and SQLite DB; ports are free ones.
* ``test``: ``check``'s run, then the deployed one (``e2e``: PostgreSQL, Redis, Airflow's
  components as processes), also on xdist workers: each deployment (a module-scoped fixture, one
  per file and executor) is an ``xdist_group`` that runs on one worker (tests/e2e/conftest.py).
  Together the same tests as a single ``pytest -m "not reliability"``.

Exit code: the first run's that failed (pytest's: 1 failed tests, 2 interrupted, ...). The deployed
run starts only if the first one ended (passed or failed tests), not if it was interrupted or broke.
SIGTERM and SIGINT go to the running pytest's whole process group (xdist's workers too), which
tears down what it started (tests/interrupt.py); this process then exits with that run's code.

Usage: ``python tests/suite.py check|test [pytest args...]``; SUITE_WORKERS sets ``-n`` of both runs (2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

NOT_DEPLOYED = ["-m", "not e2e and not reliability", "--dist", "loadgroup"]
DEPLOYED = ["-m", "e2e and not reliability", "--dist", "loadgroup"]
# pytest's exit codes after which the next run still starts: 0 passed, 1 some tests failed
CARRY_ON = {0, 1}
NO_TESTS = 5  # pytest's "no tests collected": a failure, unless PYTEST_ARGS chose tests of one run only


def runs(command: str, workers: str) -> list[list[str]]:
    parallel = ["-n", workers, *NOT_DEPLOYED]
    return {"check": [parallel], "test": [parallel, ["-n", workers, *DEPLOYED]]}[command]


def run(args: list[str]) -> int:
    """One pytest run in its own process group; SIGTERM/SIGINT to this process go to that group."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], start_new_session=True)

    def forward(signum: int, frame: object) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
        return code if code >= 0 else 128 - code  # killed by a signal: the shell's 128 + its number
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("check", "test"):
        print(__doc__, file=sys.stderr)
        return 4
    command, extra = argv[0], argv[1:]
    code = 0
    for args in runs(command, os.environ.get("SUITE_WORKERS", "2")):
        started = time.monotonic()
        result = run(["-q", *args, *extra])
        if result == NO_TESTS and extra:
            result = 0
        print(f"suite.py {command}: pytest {' '.join(args)} -> exit {result} in "
              f"{time.monotonic() - started:.0f} s", flush=True)
        code = code or result
        if result not in CARRY_ON:
            break
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
