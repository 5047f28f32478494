"""Every Vertex answer of the emulator printed as Google's servers print it: canonical proto3 JSON.

Proto3's JSON mapping leaves out a field with no presence that holds its default (``false``, 0,
``""``, an enum's 0 value, an empty list or map), so real Vertex answers an operation that is
not done without any ``done`` key and an idle pool without ``usedReplicaCount`` (recorded, issue
40); a field with presence (a message, proto3 ``optional``, a oneof member) is printed whenever
it is set, even at its default, and a ``Struct``/``Value`` is printed as it is. The resources
build their answers from our pydantic models (``to_api()``), which cannot tell a default from a
value set; :func:`canonical` applies the rule once, for every answer (``app.py``), driven by the
vendored schema table (``vertex/data/request_schema.json``: each served method's response type,
each field's kind and presence, from the discovery document and the protos). The control API
(``/emulator/v1/...``) is ours and keeps its own format.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_sched.vertex import request_schema

_ZERO_KINDS = {"int32", "uint32", "int64", "uint64", "double", "float"}
_TYPE_PREFIX = "type.googleapis.com/"


def canonical(rpc: str, body: Any) -> Any:
    """``body`` (the answer of ``rpc``) without the fields proto3 JSON omits; an rpc the table
    does not list (Cloud Quotas: another API) is returned as it is."""
    schema = request_schema.load()["responses"].get(rpc)
    return body if schema is None else _message(body, schema)


def _message(obj: Any, schema_name: str) -> Any:
    schema = request_schema.load()["schemas"].get(schema_name)
    if schema is None or not isinstance(obj, dict):
        return obj
    fields = schema["fields"]
    out: dict[str, Any] = {}
    for key, value in obj.items():
        field = fields.get(key)
        if field is None:  # "@type" of an Any, or a field the table lacks: as it is
            out[key] = value
        elif value is None:
            continue
        elif field.get("map") or field.get("repeated"):
            if value:  # an empty list or map is not printed
                out[key] = ({k: _value(v, field) for k, v in value.items()} if isinstance(value, dict)
                            else [_value(v, field) for v in value] if isinstance(value, list) else value)
        elif "ref" in field or field.get("presence") or not _is_default(value, field):
            out[key] = _value(value, field)
    return out


def _value(value: Any, field: dict) -> Any:
    if "ref" in field:
        return _message(value, field["ref"])
    if field.get("any") and isinstance(value, dict):
        return _any(value)
    return value  # a scalar, a Struct or a Value: printed as it is


def _any(value: dict) -> dict:
    """A google.protobuf.Any: ``@type`` kept, the rest printed as the message it names."""
    type_url = value.get("@type")
    if not isinstance(type_url, str) or not type_url.startswith(_TYPE_PREFIX):
        return value
    full_name = type_url.removeprefix(_TYPE_PREFIX)
    schema_name = ("GoogleProtobufEmpty" if full_name == "google.protobuf.Empty" else
                   "GoogleLongrunningOperation" if full_name == "google.longrunning.Operation" else
                   "GoogleCloudAiplatformV1" + full_name.removeprefix("google.cloud.aiplatform.v1.")
                   if full_name.startswith("google.cloud.aiplatform.v1.") else None)
    return value if schema_name is None else _message(value, schema_name)


def _is_default(value: Any, field: dict) -> bool:
    kind = field.get("kind")
    if kind == "bool":
        return value is False
    if kind in ("string", "bytes"):
        return value == ""
    if kind in _ZERO_KINDS:
        return value in (0, "0") and not isinstance(value, bool)
    if kind == "enum":
        return value == 0 or field.get("enum", {}).get(value) == 0
    return False  # timestamps, durations, field masks, Struct/Value: messages, printed when set
