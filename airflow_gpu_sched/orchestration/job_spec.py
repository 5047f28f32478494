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


def with_machine_spec(pools: list[dict], extra: dict[str, Any]) -> list[dict]:
    """Every pool that asks for replicas with ``extra`` in its machineSpec (a reservation step's
    ``reservationAffinity``: Vertex AI reads it per pool)."""
    if not extra:
        return pools
    return [{**pool, "machineSpec": {**(pool.get("machineSpec") or {}), **extra}} if pool else pool for pool in pools]


def build_custom_job(*, display_name: str, pools: list[dict], scheduling: dict[str, Any] | None,
                     labels: dict[str, str] | None = None, base_output_dir: str | None = None,
                     service_account: str | None = None, persistent_resource_id: str | None = None,
                     given: dict[str, Any] | None = None, own_display_name: bool = True) -> CustomJob:
    """Parse the job; raises :class:`InvalidTrainingSpec` when it does not even parse. With
    ``given`` (job_spec=), the body is merged over it (:func:`merge_given_job`) and checked
    against Google's schema first."""
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
        if given is not None:
            body = merge_given_job(given, CustomJob.model_validate(body).to_api(), own_display_name=own_display_name)
            found = schema_violations(body)
            if found:
                raise _invalid_all(found)
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


# ---------------------------------------------------------------------- job_spec= (a whole CustomJob body)

# Set by the plan's step (its strategy and wait) and by the operator's own arguments: what a
# given job_spec says there is replaced, so one body runs under every step of a plan.
_PLAN_OWNED = ("persistentResourceId",)
_PLAN_OWNED_SCHEDULING = ("strategy", "maxWaitDuration")


def parse_given_job(value: Any) -> dict[str, Any] | None:
    """``job_spec=`` as a CustomJob body (REST JSON, as ``customJobs.create`` takes it): a dict,
    or text (a rendered template file: JSON or YAML). A bare CustomJobSpec (what ``gcloud ai
    custom-jobs create --config`` reads: ``workerPoolSpecs`` at the top) is wrapped as its
    ``jobSpec``. None: no job_spec. Errors name ``job_spec``."""
    if value is None:
        return None
    if isinstance(value, str):
        import yaml  # JSON is YAML too

        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise _invalid("job_spec", f"is text that is neither JSON nor YAML ({exc})") from None
    if not isinstance(value, dict):
        raise _invalid("job_spec", f"must be a CustomJob body (a mapping) or a .json/.yaml file "
                                   f"(got {type(value).__name__})")
    if "jobSpec" not in value and "job_spec" not in value:
        value = {"jobSpec": value}
    return value


def given_pools(given: dict[str, Any] | None) -> Any:
    spec = (given or {}).get("jobSpec") or (given or {}).get("job_spec") or {}
    return spec.get("workerPoolSpecs", spec.get("worker_pool_specs"))


def merge_given_job(given: dict[str, Any], ours: dict[str, Any], *, own_display_name: bool) -> dict[str, Any]:
    """The body submitted: ``given`` (job_spec=) with the operator's arguments and the plan's
    step over it. The step's scheduling strategy/wait and resource win; labels are merged
    (ours over given's); the display name is the given one unless the operator names one."""
    import copy

    out = copy.deepcopy(given)
    spec = out.pop("job_spec", None) or out.pop("jobSpec", None) or {}
    for key in _PLAN_OWNED:
        spec.pop(key, None)
    scheduling = {k: v for k, v in (spec.pop("scheduling", None) or {}).items() if k not in _PLAN_OWNED_SCHEDULING}
    for key, value in ours["jobSpec"].items():
        if key == "scheduling":
            scheduling.update(value)
        else:
            spec[key] = value
    if scheduling:
        spec["scheduling"] = scheduling
    out["jobSpec"] = spec
    labels = {**(out.get("labels") or {}), **(ours.get("labels") or {})}
    if labels:
        out["labels"] = labels
    if own_display_name or not out.get("displayName"):
        out["displayName"] = ours["displayName"]
    return out


def schema_violations(body: dict[str, Any]) -> list[Violation]:
    """What Google's JSON front end would refuse in the CustomJob body (unknown fields, wrong
    JSON types), from the vendored discovery/proto table; paths as Google names them
    (``custom_job.job_spec.worker_pool_specs[0]...``)."""
    from airflow_gpu_sched.vertex.strict_json import body_errors

    return [Violation(f"job_spec ({path})" if path else "job_spec", text)
            for path, text in body_errors("customJobs.create", body)]
