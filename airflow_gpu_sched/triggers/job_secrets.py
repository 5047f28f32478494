"""A job's env values where its text is written: learned from the job itself, never carried.

The worker rendered the env (``{{ var.value.hf_token }}``); the triggerer never saw it, and the
trigger's kwargs must not carry it (they are stored in the ``trigger`` table). Vertex returns the
spec it runs: ``GET`` of a custom job has ``jobSpec.workerPoolSpecs[].containerSpec.env``, a
tuning job's ``trialJobSpec`` and a pipeline's ``trainingTaskInputs`` the same. So the tail of a
job's log lines reads the job once, before it writes its first line, and cuts every value by the
rule of :mod:`airflow_gpu_sched.orchestration.redaction` from each line it writes. It also
registers with Airflow's masker in that process what that masker would take in the worker (an
env value under a name it deems sensitive, ``HF_TOKEN``; what the worker's masker hid), for the
records the trigger does not write itself; not every env value, since that masker serves every
task of the process and never forgets. The registration may not reach the handler that writes a
trigger's log file: the cut of every env value is ours either way.

What Airflow's masker hides in the worker but is not in the env (a sensitive Variable rendered
into ``args``) the worker tells as places in the job's spec, never as text (the trigger's
``masked`` kwarg, :func:`airflow_gpu_sched.orchestration.redaction.masked_spans`); the texts
there are read from the job here and cut the same way.

The minimum length is Airflow's (``[logging] min_length_masked_secret``, as the masker in this
process was configured), so a value the masker would hide is cut, and one it leaves is left.

May import: vertex, orchestration, triggers; airflow.
"""

from __future__ import annotations

import sys
from contextlib import suppress
from typing import Any

from airflow_gpu_sched.orchestration.redaction import MIN_SECRET, Redactor, env_values


def airflow_min_length() -> int:
    """The masker's minimum secret length in this process (Airflow sets it from ``[logging]
    min_length_masked_secret``), or :data:`MIN_SECRET` outside Airflow."""
    if "airflow.sdk" not in sys.modules:  # not under Airflow: importing it would load its config
        return MIN_SECRET
    try:
        from airflow.sdk._shared.secrets_masker.secrets_masker import _secrets_masker

        found = int(_secrets_masker().min_length_to_mask)
    except Exception:  # noqa: BLE001 - another Airflow's masker: its documented default
        return MIN_SECRET
    return found if found > 0 else MIN_SECRET


def job_redactor(job_wire: Any) -> Redactor:
    """The cut of every env value of a job (its REST JSON), at this process's minimum length."""
    return Redactor(env_values(job_wire), airflow_min_length())


async def learn(client: Any, job_name: str, masked: Any = None) -> Redactor:
    """GET the job; register its env values, and the texts at ``masked`` (the places in its spec
    Airflow's masker cut in the worker, :func:`redaction.masked_spans`), with Airflow's masker
    here; the cut of them all. A :class:`VertexError` (the job unreadable) goes to the caller,
    which writes nothing meanwhile."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.orchestration.redaction import env_items, values_at

    resource = await job_type_of(job_name).get(client, job_name)
    wire = resource.to_api() if hasattr(resource, "to_api") else resource
    redactor = job_redactor(wire)
    hidden = values_at(wire, masked or ())
    redactor.add(hidden)
    # Airflow's masker is the process's, for every task's logs and never forgets: it gets what it
    # would take in the worker (a value under a sensitive name, what the worker's masker hid),
    # not every env value (an EPOCHS of 10000 would cut every "10000" of every job)
    for name, value in env_items(wire):
        await _register(value, name)
    for value in hidden:
        await _register(value, None)
    return redactor


async def _register(secret: str, name: str | None) -> None:
    if "airflow.sdk" not in sys.modules:  # not under Airflow: importing it would load its config
        return
    from airflow_gpu_sched import compat

    amask_secret = compat.resolve("amask_secret", None)
    if amask_secret is None:
        return
    with suppress(Exception):  # masking must never break the tail
        await amask_secret(secret, name)


def cut_event(event: dict[str, Any], redact: Any) -> dict[str, Any]:
    """The event's texts that may quote the job's output (its ``message``, the job's ``error``)
    with the job's secrets cut: the event is logged by the triggerer and stored in
    ``next_kwargs``. Unchanged when the secrets were not learned (``redact`` None)."""
    if redact is None:
        return event
    out = dict(event)
    if isinstance(out.get("message"), str):
        out["message"] = redact(out["message"])
    for key in ("job", "resource"):
        resource = out.get(key)
        error = resource.get("error") if isinstance(resource, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            out[key] = {**resource, "error": {**error, "message": redact(error["message"])}}
    return out
