"""Build the CustomJob an operator submits from its arguments, and check it against the rules.

Operators take either ``worker_pool_specs`` (REST JSON dicts as in the Vertex docs, the pydantic
models, or a JSON string once templated) or the one-pool shorthand (``image_uri``,
``machine_type``, ...). Both end here, so there is one way a job is built and one place that
turns rule violations into :class:`InvalidTrainingSpec`.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from airflow_gpu_sched.vertex.models import CustomJob, WorkerPoolSpec
from airflow_gpu_sched.vertex.rules import Violation, check_custom_job, parse_violations

_JINJA = re.compile(r"{{|{%")


def worker_pools(worker_pool_specs: Any = None, *, image_uri: str | None = None,
                 command: list[str] | None = None, args: list[str] | None = None,
                 env: dict[str, str] | None = None, machine_type: str | None = None,
                 accelerator_type: str | None = None, accelerator_count: int | None = None,
                 replica_count: int | None = None) -> list[dict]:
    """The job's ``workerPoolSpecs`` as REST JSON (camelCase)."""
    shorthand = {"image_uri": image_uri, "command": command, "args": args, "env": env,
                 "machine_type": machine_type, "accelerator_type": accelerator_type,
                 "accelerator_count": accelerator_count}
    if worker_pool_specs is not None:
        given = [k for k, v in shorthand.items() if v is not None]
        if given:
            raise _invalid("worker_pool_specs", f"give worker_pool_specs or the one-pool arguments "
                                                f"({', '.join(given)}), not both")
        return _pools_from(worker_pool_specs)
    if image_uri is None and machine_type is None:
        raise _invalid("worker_pool_specs", "give worker_pool_specs, or image_uri and machine_type for one pool")
    machine: dict[str, Any] = {"machineType": machine_type}
    if accelerator_type is not None:
        machine["acceleratorType"] = accelerator_type
    if accelerator_count is not None:
        machine["acceleratorCount"] = accelerator_count
    container: dict[str, Any] = {"imageUri": image_uri}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = [str(a) for a in args]
    if env:
        if not isinstance(env, dict):
            raise _invalid("env", f"must be a mapping of names to values (got {type(env).__name__})")
        container["env"] = [{"name": str(k), "value": str(v)} for k, v in env.items()]
    return [{"machineSpec": machine, "replicaCount": replica_count or 1, "containerSpec": container}]


def _pools_from(value: Any) -> list[dict]:
    if isinstance(value, str):  # a template that rendered to text
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _invalid("worker_pool_specs", f"is a string that is not JSON ({exc.msg} at position "
                                                f"{exc.pos}); give a list of worker pool dicts") from None
    if isinstance(value, (dict, WorkerPoolSpec)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _invalid("worker_pool_specs", f"must be a list of worker pools (got {type(value).__name__})")
    pools = []
    for index, pool in enumerate(value):
        if isinstance(pool, WorkerPoolSpec):
            pools.append(pool.to_api())
        elif isinstance(pool, dict):
            pools.append(pool)
        else:
            raise _invalid(f"worker_pool_specs[{index}]", f"must be a dict or WorkerPoolSpec (got {type(pool).__name__})")
    return pools


def build_custom_job(*, display_name: str, pools: list[dict], scheduling: dict[str, Any] | None,
                     labels: dict[str, str] | None = None, base_output_dir: str | None = None,
                     service_account: str | None = None, persistent_resource_id: str | None = None) -> CustomJob:
    """Parse the job; raises :class:`InvalidTrainingSpec` when it does not even parse."""
    spec: dict[str, Any] = {"workerPoolSpecs": pools}
    if scheduling:
        spec["scheduling"] = scheduling
    if base_output_dir:
        spec["baseOutputDirectory"] = {"outputUriPrefix": base_output_dir}
    if service_account:
        spec["serviceAccount"] = service_account
    if persistent_resource_id is not None:
        spec["persistentResourceId"] = persistent_resource_id
    body = {"displayName": display_name, "jobSpec": spec}
    if labels:
        body["labels"] = labels
    try:
        return CustomJob.model_validate(body)
    except ValidationError as exc:
        raise _invalid_all(parse_violations(exc)) from None


def violations(job: CustomJob, *, ignore_templates: bool = False) -> list[Violation]:
    """The rules the job breaks. With ``ignore_templates`` (DAG parse time), a violation on a
    field whose value is still a Jinja template is left for the check after rendering."""
    found = check_custom_job(job)
    if ignore_templates:
        wire = job.to_api()
        found = [v for v in found if not _templated(_value_at(wire, v.path))]
    return found


def _value_at(wire: Any, path: str) -> Any:
    value = wire
    for name, index in re.findall(r"([A-Za-z_][\w-]*)|\[(\d+)\]", path):
        try:
            value = value[int(index)] if index else value[name]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_JINJA.search(value))
    if isinstance(value, dict):
        return any(_templated(k) or _templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_templated(v) for v in value)
    return False


def has_template(value: Any) -> bool:
    return _templated(value)


def _invalid(path: str, rule: str):
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    return InvalidTrainingSpec([Violation(path, rule)])


def _invalid_all(found: list[Violation]):
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    return InvalidTrainingSpec(found)
