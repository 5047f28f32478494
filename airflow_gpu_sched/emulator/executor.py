"""``--execute``: run a job's container command as a local process while it is RUNNING.

Off by default, and only with the emulator on loopback: it runs commands from job specs.
What a worker on Vertex AI gets, it gets here: the first pool's ``env``, plus
``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` under
``baseOutputDirectory`` (``gs://bucket/path`` maps to ``<root>/bucket/path``). A preemption
sends the process SIGTERM (as a Spot VM's shutdown notice) and, after a grace period, SIGKILL;
a restart runs it again, so a script that checkpoints resumes where it stopped. The process's
exit decides the job: 0 -> SUCCEEDED, anything else -> FAILED with that exit status. Its stdout
goes to ``<root>/logs/<job id>-<run>.log``, its stderr to ``<job id>-<run>.err`` (Cloud Logging
severities INFO and ERROR in ``entries:list``: :mod:`.job_logs`).

Contained (issue 37): ``baseOutputDirectory`` must be a ``gs://`` URI whose path stays under
the root (``gs://b/../../x`` and local paths are refused at create, :meth:`output_problem`);
each process leads its own process group, signalled whole; a stop never waits in the event
loop (SIGKILL after the grace period comes from a thread); the processes die with the emulator
(its shutdown kills their groups, and Linux's PR_SET_PDEATHSIG kills a process whose emulator
was SIGKILLed).

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

GRACE_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


try:  # loaded here, not in the child: no dlopen between fork and exec
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):  # pragma: no cover
    _PRCTL = None


def _die_with_parent() -> None:  # pragma: no cover (runs in the child, between fork and exec)
    """The child gets SIGKILL when the thread that started it (the emulator's server) dies: a
    SIGKILLed emulator leaves no job process behind (Linux; elsewhere shutdown's killpg only)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # the process leads its group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


class LocalExecutor:
    def __init__(self, root: str | os.PathLike, workdir: str | os.PathLike | None = None):
        self.root = Path(root).resolve()
        self.workdir = Path(workdir).resolve() if workdir else Path.cwd()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self._running: dict[str, subprocess.Popen] = {}
        self._stopping: dict[str, subprocess.Popen] = {}  # SIGTERMed, not yet reaped
        self._runs: dict[str, int] = {}

    def local_path(self, uri: str) -> Path:
        """Where ``gs://bucket/path`` lives: ``<root>/bucket/path``; ValueError for any other URI or
        a path that leaves the root (``..``, a symlink out)."""
        if not uri.startswith("gs://"):
            raise ValueError(f"{uri[:200]!r} is not a gs:// URI: with --execute, outputs go under the execute root")
        path = (self.root / uri.removeprefix("gs://").lstrip("/")).resolve()
        if path != self.root and not path.is_relative_to(self.root):
            raise ValueError(f"{uri[:200]!r} leaves the execute root ({self.root}): '..' is not followed")
        return path

    def output_problem(self, spec: Any) -> str | None:
        """Why the job's baseOutputDirectory cannot be served under the root, or None."""
        base = spec.base_output_directory
        if base is None or not base.output_uri_prefix:
            return None
        try:
            self.local_path(base.output_uri_prefix)
        except ValueError as exc:
            return str(exc)
        return None

    def start(self, job: Any) -> None:
        spec = job.job_spec
        pool = spec.worker_pool_specs[0]
        task = pool.container_spec or pool.python_package_spec
        if pool.container_spec is not None:
            argv = [*(task.command or []), *(task.args or [])]
        else:
            argv = ["python", "-m", task.python_module or "", *(task.args or [])]
        if not argv:
            argv = ["true"]  # an image's own entrypoint cannot run here: succeed at once
        elif argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the image's python is this machine's
        env = {**os.environ, **pool.env, "CLOUD_ML_JOB_ID": job.job_id or ""}
        problem = self.output_problem(spec)  # refused at a custom job's create; a trial's or pipeline's: here
        if problem:
            argv = [sys.executable, "-c", "import sys; sys.exit(sys.argv[1])", f"baseOutputDirectory: {problem}"]
        elif spec.base_output_directory and spec.base_output_directory.output_uri_prefix:
            base = self.local_path(spec.base_output_directory.output_uri_prefix)
            for name, sub in (("AIP_MODEL_DIR", "model"), ("AIP_CHECKPOINT_DIR", "checkpoints"),
                              ("AIP_TENSORBOARD_LOG_DIR", "logs")):
                (base / sub).mkdir(parents=True, exist_ok=True)
                env[name] = f"{base / sub}/"
        self._end_previous(job.name)
        run = self._runs[job.name] = self._runs.get(job.name, 0) + 1
        log = open(self.root / "logs" / f"{job.job_id}-{run}.log", "w")  # noqa: SIM115 (the child owns it)
        err = open(self.root / "logs" / f"{job.job_id}-{run}.err", "w")  # noqa: SIM115
        self._running[job.name] = subprocess.Popen(argv, env=env, cwd=self.workdir, stdout=log, stderr=err,
                                                   start_new_session=True, preexec_fn=_die_with_parent)
        log.close()
        err.close()

    def _end_previous(self, job_name: str) -> None:
        """A restart that comes before the last run's grace period ended: that run is killed now
        (SIGKILL ends it at once), so two runs never write the same checkpoints."""
        previous = self._stopping.pop(job_name, None)
        if previous is not None and previous.poll() is None:
            _signal_group(previous, signal.SIGKILL)
            previous.wait()

    def runs(self, job_name: str) -> int:
        """How many times the job's process was started (its log files are numbered 1..runs)."""
        return self._runs.get(job_name, 0)

    def is_running(self, job_name: str) -> bool:
        return job_name in self._running

    def stop(self, job_name: str) -> None:
        """SIGTERM to the process's group (the shutdown notice), then SIGKILL after the grace period,
        from a thread: the caller (the event loop) never waits for the process."""
        process = self._running.pop(job_name, None)
        if process is None or process.poll() is not None:
            return
        _signal_group(process, signal.SIGTERM)
        self._stopping[job_name] = process

        def reap() -> None:
            try:
                process.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            if self._stopping.get(job_name) is process:
                self._stopping.pop(job_name, None)

        threading.Thread(target=reap, name=f"stop {job_name}", daemon=True).start()

    def finished(self) -> list[tuple[str, int]]:
        """(job name, exit status) of every process that ended on its own since the last call."""
        done = [(name, p.returncode) for name, p in self._running.items() if p.poll() is not None]
        for name, _ in done:
            del self._running[name]
        return done

    def stop_all(self) -> None:
        for name in list(self._running):
            self.stop(name)

    def shutdown(self, grace: float = 2.0) -> None:
        """The emulator stops: every group SIGTERMed, then SIGKILLed after ``grace`` (not in a loop)."""
        processes = [*self._running.values(), *self._stopping.values()]
        self._running.clear()
        for process in processes:
            if process.poll() is None:
                _signal_group(process, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process, signal.SIGKILL)
            if process.poll() is None:
                process.wait()
        self._stopping.clear()
