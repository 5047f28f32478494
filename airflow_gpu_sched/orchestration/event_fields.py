"""What of a training resource may leave the worker: the one whitelist of trigger events and kwargs.

A trigger's event is logged in full by the triggerer and stored unencrypted in
``task_instance.next_kwargs``; its kwargs are stored in the ``trigger`` table. Values rendered in
the worker (``{{ var.value.hf_token }}`` into ``env`` or ``args``) were never registered with the
triggerer's secrets masker. So events and kwargs carry only what the operator decides by:

- of every resource: ``name``, ``displayName``, ``state``, the four times, ``error``, ``labels``;
- of its spec (``jobSpec``, a tuning job's ``trialJobSpec``, a pipeline's ``trainingTaskInputs``):
  ``scheduling``, ``persistentResourceId``, ``baseOutputDirectory``, and per worker pool
  ``machineSpec``, ``replicaCount``, ``diskSpec`` (positions kept: an empty pool stays ``{}``);
- of a tuning job: ``studySpec``, the trial counts, and per trial its id, state, parameters,
  measurements, times and CustomJob name;
- of a pipeline: ``trainingTaskDefinition``, ``modelId``, ``parentModel``, and of
  ``modelToUpload`` its ``name``, ``versionId`` and ``displayName``.

Everything else is dropped, whatever it is called: ``containerSpec`` and ``pythonPackageSpec``
(``env``, ``args``, ``command``), the serving container of ``modelToUpload``, ``nfsMounts``,
``serviceAccount``, ``network``, and any field Google adds later. A whitelist, not a blacklist:
a new field is kept out until someone decides the operator needs it.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from typing import Any

ALL = True  # keep this field's whole value (no secrets inside by its definition)

_POOL: dict[str, Any] = {"machineSpec": ALL, "replicaCount": ALL, "diskSpec": ALL}
SPEC_FIELDS: dict[str, Any] = {"workerPoolSpecs": [_POOL], "scheduling": ALL, "persistentResourceId": ALL,
                               "baseOutputDirectory": ALL}
_TRIAL: dict[str, Any] = {"name": ALL, "id": ALL, "state": ALL, "parameters": ALL, "finalMeasurement": ALL,
                          "measurements": ALL, "startTime": ALL, "endTime": ALL, "customJob": ALL,
                          "infeasibleReason": ALL}
# One shape for the three job types (a tuning job's or pipeline's view is a CustomJob of its spec).
RESOURCE_FIELDS: dict[str, Any] = {
    "name": ALL, "displayName": ALL, "state": ALL, "createTime": ALL, "startTime": ALL, "endTime": ALL,
    "updateTime": ALL, "error": ALL, "labels": ALL,
    "jobSpec": SPEC_FIELDS,  # CustomJob
    "trialJobSpec": SPEC_FIELDS, "studySpec": ALL, "maxTrialCount": ALL, "parallelTrialCount": ALL,
    "maxFailedTrialCount": ALL, "trials": [_TRIAL],  # HyperparameterTuningJob
    "trainingTaskInputs": SPEC_FIELDS, "trainingTaskDefinition": ALL, "modelId": ALL, "parentModel": ALL,
    "modelToUpload": {"name": ALL, "versionId": ALL, "displayName": ALL},  # TrainingPipeline
}


def keep(value: Any, fields: Any) -> Any:
    """``value`` (REST JSON) cut down to ``fields``: ALL keeps it, a dict keeps its keys, a one-item
    list applies its item to every element. A value of the wrong shape is dropped (None)."""
    if fields is ALL:
        return value
    if isinstance(fields, list):
        return [keep(v, fields[0]) for v in value] if isinstance(value, list) else None
    if not isinstance(value, dict):
        return None
    out = {}
    for key, sub in fields.items():
        if key in value:
            kept = keep(value[key], sub)
            if kept is not None:
                out[key] = kept
    return out


def public_resource(resource: Any) -> dict[str, Any]:
    """A resource (a model with ``to_api()`` or its REST JSON) as a trigger event may carry it."""
    wire = resource.to_api() if hasattr(resource, "to_api") else resource
    return keep(wire, RESOURCE_FIELDS)


def public_spec(spec: Any) -> dict[str, Any]:
    """A CustomJobSpec (model or REST JSON) as a trigger's kwargs may carry it."""
    wire = spec.to_api() if hasattr(spec, "to_api") else spec
    return keep(wire, SPEC_FIELDS)
