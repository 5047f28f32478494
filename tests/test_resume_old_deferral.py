"""A task deferred by the previous version (main at 1fc32e3, before the operator's split into
training_spec / run / vertex_calls / events / waits) resumes on this one: the serialized trigger
(class path and kwargs, as the triggerer's table holds them) and the submission ledger (as the
task state store holds it) are literal fixtures here, written as that version wrote them; the
job lives on the emulator. The triggerer rebuilds the trigger from its class path and kwargs,
its event comes back through the ``method_name`` the deferral named, and the operator finishes
the task from the ledger: one job, one attempt, no new submission."""

from __future__ import annotations

import asyncio
import copy
import importlib
from datetime import datetime, timezone
from typing import Any

from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.conftest import LOCATION, PROJECT
from tests.test_triggers import _create, _job

KEY = "3f6c1e0a9b2d4c5e8f7a6b5c4d3e2f10"
JOB = "{job}"  # the emulator names the job: put in by _fixtures
BY = 4102444800.0  # 2100-01-01: the bound before RUNNING the deferring try kept

# CustomJobTrigger.serialize() as 1fc32e3 wrote it for this operator (poll_interval=0.02)
SERIALIZED_TRIGGER = ("airflow_gpu_sched.triggers.job.CustomJobTrigger", {
    "job_name": JOB, "gcp_conn_id": "google_cloud_default", "poll_interval": 0.02,
    "transient_error_window": 600.0, "observed_restarts": 0, "polling": "batched", "running_by": BY,
    "bound_reason": "capacity_wait_timeout 1 day, 0:00:00 of SPOT", "impersonation_chain": None,
    "stream_logs": True, "log_lines_per_minute": 600, "observed": None})
METHOD_NAME = "execute_complete"  # the deferral's method_name in 1fc32e3

# the task state store's value under "airflow_gpu_sched.ledger" once 1fc32e3 deferred: a new
# submission (key saved, then the job name and try), the bound kept, no attempt closed yet
LEDGER_DATA = {"run": "0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f6", "submission_key": KEY, "job_name": JOB,
               "attempts": [], "preemptions": 0, "completed": False, "position": 0,
               "running_bound": {"by": BY, "why": "capacity_wait_timeout 1 day, 0:00:00 of SPOT"},
               "failed": None, "job_try": 1}


class _Store:
    """A task state store (get/set by key, as Airflow's)."""

    def __init__(self, data: dict[str, Any]):
        self.values = {LEDGER_KEY: data}

    def get(self, key: str, default: Any = None) -> Any:
        return copy.deepcopy(self.values.get(key, default))

    def set(self, key: str, value: Any, **_: Any) -> None:
        self.values[key] = copy.deepcopy(value)


class _TI:
    try_number, max_tries, map_index, run_id = 1, 0, -1, "manual__2026-01-01"

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _fixtures(emulator) -> tuple[str, tuple[str, dict[str, Any]], dict[str, Any]]:
    body = _job(strategy="SPOT", run_seconds=30)
    body["labels"] = {"managed-by": "airflow-gpu-sched", "gpu-sched-submission": KEY}
    name = _create(emulator, body)
    path, kwargs = SERIALIZED_TRIGGER
    kwargs = {k: (name if v == JOB else v) for k, v in kwargs.items()}
    ledger = {k: (name if v == JOB else v) for k, v in LEDGER_DATA.items()}
    return name, (path, kwargs), ledger


def _operator():
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator

    with DAG("resume_old", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
        return SpotTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                                    machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
                                    accelerator_count=1, poll_interval=0.02, deferrable=True)


def _rebuilt(path: str, kwargs: dict[str, Any]) -> Any:
    """As the triggerer does: import the class path, construct with the kwargs."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


async def _first_event(trigger) -> dict[str, Any]:
    async def first():
        async for event in trigger.run():
            return event.payload
    return await asyncio.wait_for(first(), 60)


def test_a_task_deferred_by_the_previous_version_finishes_on_this_one(fast_emulator):
    name, (path, kwargs), ledger = _fixtures(fast_emulator)
    trigger = _rebuilt(path, kwargs)
    assert trigger.serialize() == (path, kwargs)  # the stored kwargs are still this trigger's
    event = asyncio.run(_first_event(trigger))
    op = _operator()
    store, ti = _Store(ledger), _TI()
    result = getattr(op, METHOD_NAME)({"task_state_store": store, "ti": ti}, event)

    assert result["job_name"] == name
    assert [(a["job_name"], a["state"]) for a in result["attempts"]] == [(name, "JOB_STATE_SUCCEEDED")]
    kept = store.values[LEDGER_KEY]
    assert kept["completed"] is True and kept["run"] == LEDGER_DATA["run"] and len(kept["attempts"]) == 1
    assert fast_emulator.stats()["jobsCreated"] == {"SPOT": 1}  # no second submission


def test_a_retry_of_a_task_the_previous_version_deferred_re_attaches_to_its_job(fast_emulator):
    """The deferring try's worker died (no event came back): the next try starts over from
    ``execute`` on this version, finds the job by the ledger's name and waits for it."""
    name, _, ledger = _fixtures(fast_emulator)
    op = _operator()
    op.deferrable = False  # waits in this process: the test sees the end
    store, ti = _Store(ledger), _TI()
    ti.try_number, ti.max_tries = 2, 1
    result = op.execute({"task_state_store": store, "ti": ti})

    assert result["job_name"] == name and len(result["attempts"]) == 1
    assert store.values[LEDGER_KEY]["completed"] is True
    assert fast_emulator.stats()["jobsCreated"] == {"SPOT": 1}
