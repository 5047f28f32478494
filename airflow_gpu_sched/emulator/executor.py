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

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

GRACE_SECONDS = 10.0


class LocalExecutor:
    def __init__(self, root: str | os.PathLike, workdir: str | os.PathLike | None = None):
        self.root = Path(root).resolve()
        self.workdir = Path(workdir).resolve() if workdir else Path.cwd()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self._running: dict[str, subprocess.Popen] = {}
        self._runs: dict[str, int] = {}

    def local_path(self, uri: str) -> Path:
        return self.root / uri.removeprefix("gs://").lstrip("/") if uri.startswith("gs://") else Path(uri)

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
        if spec.base_output_directory and spec.base_output_directory.output_uri_prefix:
            base = self.local_path(spec.base_output_directory.output_uri_prefix)
            for name, sub in (("AIP_MODEL_DIR", "model"), ("AIP_CHECKPOINT_DIR", "checkpoints"),
                              ("AIP_TENSORBOARD_LOG_DIR", "logs")):
                (base / sub).mkdir(parents=True, exist_ok=True)
                env[name] = f"{base / sub}/"
        run = self._runs[job.name] = self._runs.get(job.name, 0) + 1
        log = open(self.root / "logs" / f"{job.job_id}-{run}.log", "w")  # noqa: SIM115 (the child owns it)
        err = open(self.root / "logs" / f"{job.job_id}-{run}.err", "w")  # noqa: SIM115
        self._running[job.name] = subprocess.Popen(argv, env=env, cwd=self.workdir, stdout=log, stderr=err)
        log.close()
        err.close()

    def runs(self, job_name: str) -> int:
        """How many times the job's process was started (its log files are numbered 1..runs)."""
        return self._runs.get(job_name, 0)

    def is_running(self, job_name: str) -> bool:
        return job_name in self._running

    def stop(self, job_name: str) -> None:
        """SIGTERM (the shutdown notice), then SIGKILL after the grace period."""
        process = self._running.pop(job_name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def finished(self) -> list[tuple[str, int]]:
        """(job name, exit status) of every process that ended on its own since the last call."""
        done = [(name, p.returncode) for name, p in self._running.items() if p.poll() is not None]
        for name, _ in done:
            del self._running[name]
        return done

    def stop_all(self) -> None:
        for name in list(self._running):
            self.stop(name)
