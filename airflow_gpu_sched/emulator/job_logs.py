"""The emulated jobs' Cloud Logging entries, as Vertex AI training writes them.

Each entry: ``logName`` ``projects/P/logs/<replica>``, ``resource`` ``{"type": "ml_job",
"labels": {"job_id", "project_id", "task_name"}}``, ``labels``
``{"ml.googleapis.com/task_name": <replica>}``, ``severity``, ``timestamp``,
``receiveTimestamp``, ``insertId`` and a ``textPayload`` (a process's line) or a
``jsonPayload`` ``{"message", "levelname", "attrs": {"tag": <replica>}}`` (the service's lines).

- ``--execute``: what the job's process prints (:mod:`.executor`: stdout -> INFO, stderr ->
  ERROR, replica ``workerpool0-0``, the one process the executor runs), read when
  ``entries:list`` is called and stamped with the emulated clock then (line order within a
  stream kept; stdout and stderr interleave by read, not by write).
- otherwise: synthetic lines derived from the job's state history: the service's entry on each
  state change (log ``ml.googleapis.com%2F<job_id>``, label ``ml.googleapis.com/job_state``,
  e.g. "Waiting for job to be provisioned."), a start line per replica
  for each run, a checkpoint every :data:`CHECKPOINT_SECONDS` of run time, a preemption notice
  when a run ends in a preemption, the exit (or, for a failed job, a traceback-like tail on
  ``workerpool0-0`` and the service's error line).

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_gpu_sched.vertex.cloud_logging import JOB_STATE_LABEL, ML_JOB, TASK_LABEL, format_log_time, timestamp_key
from airflow_gpu_sched.vertex.enums import TERMINAL_JOB_STATE_NAMES

CHECKPOINT_SECONDS = 60.0
# The service's line on entering each waiting/running state (assumed wordings, but for PENDING's,
# seen in public reports of Vertex's logs), labelled ml.googleapis.com/job_state
STATE_LINES = {"JOB_STATE_QUEUED": "Job is queued.", "JOB_STATE_PENDING": "Waiting for job to be provisioned.",
               "JOB_STATE_RUNNING": "Job is running."}
MAX_REPLICAS = 16  # start/exit lines per replica for at most this many replicas of a job
# (_ending writes no line for EXPIRED nor PARTIALLY_SUCCEEDED)
_RUNNING, _TERMINAL = "JOB_STATE_RUNNING", TERMINAL_JOB_STATE_NAMES


def entry(project: str, job_id: str, replica: str, severity: str, when: datetime, insert_id: str,
          text: str | None = None, json_message: str | None = None) -> dict[str, Any]:
    stamp = format_log_time(when)
    out: dict[str, Any] = {
        "logName": f"projects/{project}/logs/{replica}",
        "resource": {"type": ML_JOB, "labels": {"job_id": job_id, "project_id": project, "task_name": replica}},
        "labels": {TASK_LABEL: replica}, "severity": severity, "timestamp": stamp,
        "receiveTimestamp": stamp, "insertId": insert_id}
    if json_message is not None:
        out["jsonPayload"] = {"message": json_message, "levelname": severity, "attrs": {"tag": replica}}
    else:
        out["textPayload"] = text or ""
    return out


def _replicas(job: Any) -> list[str]:
    names = [f"workerpool{i}-{r}" for i, pool in enumerate(job.job_spec.worker_pool_specs or [])
             for r in range(int(pool.replica_count or 1))]
    return names[:MAX_REPLICAS] or ["workerpool0-0"]


def synthetic(record: Any, now: datetime) -> list[dict[str, Any]]:
    """The lines a job's history implies, up to ``now`` (deterministic: the same call later
    returns these and more, with the same insertIds)."""
    job, project = record.job, record.project
    job_id = job.job_id or job.name.rsplit("/", 1)[-1]
    replicas = _replicas(job)
    out: list[dict[str, Any]] = []

    def add(replica: str, severity: str, when: datetime, key: str, text: str, service: bool = False) -> None:
        tick = timedelta(microseconds=len(out) % 1000)  # distinct, ordered stamps for lines of one instant
        out.append(entry(project, job_id, replica, severity, when + tick, f"{job_id}-{key}",
                         json_message=text if service else None, text=None if service else text))

    history = list(record.history)
    run, step = 0, 0
    for index, (state, since) in enumerate(history):
        following = history[index + 1] if index + 1 < len(history) else None
        if state in STATE_LINES:  # the service's own entry, in the job's service log, with the state
            add("service", "INFO", since, f"state{index}", STATE_LINES[state])
            out[-1].update(logName=f"projects/{project}/logs/ml.googleapis.com%2F{job_id}",
                           labels={TASK_LABEL: "service", JOB_STATE_LABEL: state})
            out[-1].pop("jsonPayload", None)
            out[-1]["textPayload"] = STATE_LINES[state]
        if state == _RUNNING:
            run += 1
            for replica in replicas:
                add(replica, "INFO", since, f"r{run}-start-{replica}",
                    f"starting training (run {run})" + (f", resuming from step {step}" if step else ""))
            until = following[1] if following else now
            tick = since + timedelta(seconds=CHECKPOINT_SECONDS)
            while tick <= until:
                step += 100
                add(replicas[0], "INFO", tick, f"r{run}-ckpt-{step}", f"checkpoint saved at step {step}")
                tick += timedelta(seconds=CHECKPOINT_SECONDS)
            if following and following[0] in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING"):
                for replica in replicas:
                    add(replica, "WARNING", following[1], f"r{run}-preempt-{replica}",
                        "preemption notice: the VM is being reclaimed (SIGTERM), checkpointing at step "
                        f"{step}")
        elif state in _TERMINAL and following is None:
            out.extend(_ending(record, state, since, replicas, add, step))
    return out


def _ending(record: Any, state: str, when: datetime, replicas: list[str], add: Any, step: int) -> list:
    error = record.job.error
    if state == "JOB_STATE_SUCCEEDED":
        for replica in replicas:
            add(replica, "INFO", when, f"end-{replica}", f"training finished at step {step}, exit status 0")
        add("service", "INFO", when, "end-service", "Job completed successfully.", service=True)
    elif state == "JOB_STATE_FAILED" and record.exit_code:
        lines = ["Traceback (most recent call last):", '  File "/app/train.py", line 88, in <module>',
                 "    main()", '  File "/app/train.py", line 61, in main', "    loss = step(batch)",
                 f"RuntimeError: training failed at step {step} (exit status {record.exit_code})"]
        if record.failure is not None and record.failure.log_lines is not None:
            lines = list(record.failure.log_lines)  # injected (scenario jobFailures)
        for i, line in enumerate(lines):
            add(replicas[0], "ERROR", when, f"end-tb-{i}", line)
        add("service", "ERROR", when, "end-service",
            (error.message if error and error.message else
             f"The replica {replicas[0]} exited with a non-zero status of {record.exit_code}."), service=True)
    elif state == "JOB_STATE_FAILED":
        add("service", "ERROR", when, "end-service", error.message if error and error.message else "Job failed.",
            service=True)
    elif state == "JOB_STATE_CANCELLED":
        add("service", "INFO", when, "end-service", "Job was cancelled.", service=True)
    return []


class ExecutedLines:
    """The ``--execute`` processes' output as entries: new complete lines of each run's stdout
    (``<id>-<run>.log``) and stderr (``<id>-<run>.err``) files, stamped when read."""

    def __init__(self) -> None:
        self._offsets: dict[Path, int] = {}
        self._entries: dict[str, list[dict[str, Any]]] = {}  # job name -> entries read so far

    def read(self, logs_dir: Path, record: Any, runs: int, now: datetime, finished: bool) -> list[dict[str, Any]]:
        job = record.job
        job_id = job.job_id or job.name.rsplit("/", 1)[-1]
        found = self._entries.setdefault(job.name, [])
        for run in range(1, runs + 1):
            for suffix, severity in ((".log", "INFO"), (".err", "ERROR")):
                path = logs_dir / f"{job_id}-{run}{suffix}"
                if not path.exists():
                    continue
                offset = self._offsets.get(path, 0)
                data = path.read_bytes()[offset:]
                last_run = run == runs
                complete = data if (finished or not last_run) else data[: data.rfind(b"\n") + 1]
                if not complete:
                    continue
                self._offsets[path] = offset + len(complete)
                for line in complete.decode("utf-8", "replace").splitlines():
                    tick = now + timedelta(microseconds=len(found) % 1_000_000)
                    found.append(entry(record.project, job_id, "workerpool0-0", severity, tick,
                                       f"{job_id}-x{len(found):07d}", text=line))
        return found


def sort_key(item: dict[str, Any]) -> tuple[str, str]:
    return timestamp_key(item["timestamp"]), item["insertId"]
