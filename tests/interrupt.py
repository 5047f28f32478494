"""SIGTERM stops a pytest run the way Ctrl-C does: teardowns run, then the process exits.

Python's default for SIGTERM is to die on the spot: no fixture teardown, no ``with`` block's exit,
no ``atexit``. A run stopped so by a timeout left schedulers, triggerers, Celery workers, Redis
and a PostgreSQL cluster running, slowing every run after it (issue 38). Raised as
KeyboardInterrupt, pytest unwinds the test, tears the fixtures down and reports "interrupted"
(exit code 2); whatever a teardown misses, tests/e2e/harness.py stops at exit.

tests/conftest.py installs it; ``pytest -p tests.interrupt`` does too (tests/test_interrupt.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupt(signum: int, frame: object) -> None:
    # once: a second SIGTERM while the teardowns run must not cut them short (SIGKILL still does).
    # A handler, not SIG_IGN: an ignored signal stays ignored in the processes started after it.
    signal.signal(signal.SIGTERM, _stopping)
    print(f"\nSIGTERM: stopping the run, its teardowns first (pid {os.getpid()})", file=sys.stderr, flush=True)
    raise KeyboardInterrupt("SIGTERM")


def _stopping(signum: int, frame: object) -> None:
    print("SIGTERM again: already stopping", file=sys.stderr, flush=True)


def install() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, unless someone set a handler already."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_configure(config: object) -> None:
    install()
