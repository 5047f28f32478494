"""Refuse request bodies Google's JSON front end refuses: unknown names and wrong JSON types.

Google parses a REST body into the method's proto request (proto3 JSON mapping) before the
service sees it; a name that is no field of the message, or a value of the wrong JSON type, is
a 400 INVALID_ARGUMENT with the parser's wording and a ``google.rpc.BadRequest`` detail, one
field violation per error. The accepted names and types are Google's (:mod:`request_schema`'s vendored
table), not our pydantic models'. Accepted, as the proto3 JSON mapping says: the lowerCamelCase
name or the proto name of a field; enums as names or numbers; 64-bit integers as strings or
numbers; ``null`` for any field (= unset).

Wording, as Google's parser answers (public reports of Google APIs' 400s):

* ``Invalid JSON payload received. Unknown name "x" at 'custom_job.job_spec': Cannot find field.``
  (no `` at '...'`` for a top-level name of a ``body: "*"`` request)
* ``Invalid value at 'custom_job.job_spec.worker_pool_specs[0].replica_count' (TYPE_INT64), "abc"``
* ``Invalid value at 'custom_job.job_spec.scheduling.strategy'
  (type.googleapis.com/google.cloud.aiplatform.v1.Scheduling.Strategy), "CHEAP"``
* ``Invalid value at 'p' (type.googleapis.com/google.protobuf.Duration), Field 'timeout',
  Illegal duration format; duration must end with 's'``
* ``Invalid value at 'parent' (field_name), Starting an object on a scalar field``
* ``Invalid JSON payload received. Unknown name "x" at 'parent': Proto field is not repeating,
  cannot start list.``
* ``Invalid value at 'custom_job.job_spec.worker_pool_specs[0]' (oneof), oneof field 'task' is
  already set. Cannot set 'pythonPackageSpec'``
* ``Invalid JSON payload received. Unknown name "": Root element must be a message.`` (a body
  that is not an object)

The oneof, root and list rules follow protobuf's JSON-to-proto converter (ProtoWriter), which
also accepts a single value for a repeated field (one element).

Several errors are joined with newlines in the message, each its own field violation.
Map values are addressed ``field[i].value`` (i: the entry's position), as Google's paths are.

The emulator answers with these errors (``emulator/strict_json.py``), and the operators check a
``job_spec=`` with them before any call.

May import: vertex; never airflow.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any

from airflow_gpu_sched.vertex.wire_scalars import MAX_DURATION_SECONDS


_WKT = "type.googleapis.com/google.protobuf."
_SCALAR_TYPE = {"string": "TYPE_STRING", "bytes": "TYPE_BYTES", "int64": "TYPE_INT64", "uint64": "TYPE_UINT64",
                "int32": "TYPE_INT32", "uint32": "TYPE_UINT32", "double": "TYPE_DOUBLE", "float": "TYPE_FLOAT",
                "bool": "TYPE_BOOL"}
_INT_RANGE = {"int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1), "int32": (-(2**31), 2**31 - 1),
              "uint32": (0, 2**32 - 1)}
_INT_TEXT = re.compile(r"^-?\d+$")
_FLOAT_TEXT = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")


def body_errors(rpc: str, body: Any, table: dict | None = None) -> list[tuple[str, str]]:
    """Every (field path, description) Google's parser would refuse in ``body`` for ``rpc``.

    ``rpc`` is a discovery method id with a body (``customJobs.create``); others have no body
    schema and raise KeyError. A single value given for a repeated field is accepted, as
    Google's parser accepts it, and wrapped in a list in ``body`` itself. ``table``: another
    API's table of the same shape (``compute_schema.load()``); default the Vertex AI one."""
    # imported here so that `python -m airflow_gpu_sched.vertex.request_schema` does not find
    # its own module already imported
    from airflow_gpu_sched.vertex.request_schema import load

    table = table or load()
    method = table["methods"][rpc]
    if not isinstance(body, dict):
        return [("", 'Invalid JSON payload received. Unknown name "": Root element must be a message.')]
    root = "" if method["body"] == "*" else method["body"]
    errors: list[tuple[str, str]] = []
    _message(body, method["schema"], root, table["schemas"], errors)
    return errors


def _render(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _at(path: str) -> str:
    return f" at '{path}'" if path else ""


def _unknown(key: str, path: str) -> tuple[str, str]:
    return path, f'Invalid JSON payload received. Unknown name "{key}"{_at(path)}: Cannot find field.'


def _invalid(path: str, type_name: str, detail: str) -> tuple[str, str]:
    return path, f"Invalid value{_at(path)} ({type_name}), {detail}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _message(value: Any, schema_name: str, path: str, schemas: dict, errors: list) -> None:
    schema = schemas[schema_name]
    if not isinstance(value, dict):
        errors.append(_invalid(path, f"type.googleapis.com/{schema['type'] or schema_name}", _render(value)))
        return
    fields = schema["fields"]
    by_proto = {f["proto"]: name for name, f in fields.items()}
    oneof_of = {member: group for group, members in schema.get("oneofs", {}).items() for member in members}
    taken: set[str] = set()
    for key, item in list(value.items()):
        name = key if key in fields else by_proto.get(key)
        if name is None:
            errors.append(_unknown(key, path))
            continue
        if item is None:  # proto3 JSON: null means the default value
            continue
        group = oneof_of.get(name)
        if group is not None:
            if group in taken:  # protobuf's ProtoWriter::ValidOneof
                errors.append(_invalid(path, "oneof", f"oneof field '{group}' is already set. Cannot set '{key}'"))
                continue
            taken.add(group)
        if fields[name].get("repeated") and not isinstance(item, list):
            # Google's parser takes a single value for a repeated field as its one element
            # (protobuf's ProtoWriter checks "is repeating" only when a list starts); the
            # backend's models get the list it stands for
            value[key] = item = [item]
            _single(item[0], fields[name], name, _join(path, fields[name]["proto"]), path, schemas, errors)
            continue
        _field(key, item, fields[name], name, path, schemas, errors)


def _field(key: str, value: Any, field: dict, json_name: str, parent: str, schemas: dict, errors: list) -> None:
    path = _join(parent, field["proto"])
    if isinstance(value, list) and not field.get("repeated"):
        errors.append((parent, f'Invalid JSON payload received. Unknown name "{key}"{_at(parent)}: '
                               "Proto field is not repeating, cannot start list."))
        return
    if field.get("repeated"):
        for i, item in enumerate(value):
            _single(item, field, json_name, f"{path}[{i}]", parent, schemas, errors)
        return
    if field.get("map"):
        if not isinstance(value, dict):
            errors.append(_invalid(path, _type_name(field, schemas), _render(value)))
            return
        for i, item in enumerate(value.values()):
            if item is not None:
                _single(item, field, json_name, f"{path}[{i}].value", path, schemas, errors)
        return
    _single(value, field, json_name, path, parent, schemas, errors)


def _type_name(field: dict, schemas: dict) -> str:
    if "ref" in field:
        return f"type.googleapis.com/{schemas[field['ref']]['type'] or field['ref']}"
    kind = field["kind"]
    if kind == "enum":
        return f"type.googleapis.com/{field['enumType']}"
    if kind in ("timestamp", "duration", "struct", "value", "fieldmask"):
        return _WKT + {"timestamp": "Timestamp", "duration": "Duration", "struct": "Struct", "value": "Value",
                       "fieldmask": "FieldMask"}[kind]
    return _SCALAR_TYPE[kind]


def _single(value: Any, field: dict, json_name: str, path: str, parent: str, schemas: dict, errors: list) -> None:
    """One value (not a list) of ``field`` at ``path``."""
    if "ref" in field:
        _message(value, field["ref"], path, schemas, errors)
        return
    kind = field["kind"]
    if kind == "value":  # google.protobuf.Value: any JSON
        return
    if kind == "struct":
        if not isinstance(value, dict):
            errors.append(_invalid(path, _type_name(field, schemas), _render(value)))
        return
    if kind in ("timestamp", "duration"):
        problem = _time_problem(kind, value)
        if problem:
            errors.append(_invalid(path, _type_name(field, schemas), f"Field '{json_name}', {problem}"))
        return
    if isinstance(value, dict):
        errors.append(_invalid(parent, field["proto"], "Starting an object on a scalar field"))
        return
    if not _scalar_ok(kind, value, field):
        errors.append(_invalid(path, _type_name(field, schemas), _render(value)))


def _scalar_ok(kind: str, value: Any, field: dict) -> bool:
    if kind == "enum":
        if isinstance(value, str):
            return value in field["enum"]
        return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
    if kind in ("string", "fieldmask"):
        return isinstance(value, str)
    if kind == "bytes":  # proto3 JSON: standard or URL-safe base64, padding optional
        if not isinstance(value, str):
            return False
        try:
            base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4))
        except (binascii.Error, ValueError):
            return False
        return True
    if kind == "bool":
        return isinstance(value, bool) or value in ("true", "false")
    if isinstance(value, bool):
        return False
    if kind in _INT_RANGE:
        if isinstance(value, str):
            if not _INT_TEXT.match(value):
                return False
            number = int(value)
        elif isinstance(value, float):
            if not value.is_integer():
                return False
            number = int(value)
        elif isinstance(value, int):
            number = value
        else:
            return False
        low, high = _INT_RANGE[kind]
        return low <= number <= high
    # double / float: numbers, numeric strings, and the proto3 JSON spellings of non-finite values
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and (value in ("NaN", "Infinity", "-Infinity") or bool(_FLOAT_TEXT.match(value)))


def _time_problem(kind: str, value: Any) -> str | None:
    # protobuf's JSON parser's messages (util/internal/proto_writer / json_util)
    if kind == "duration":
        if not isinstance(value, str):
            return "Invalid data type for duration"
        if not value.endswith("s"):
            return "Illegal duration format; duration must end with 's'"
        if not _DURATION.match(value):
            return "Invalid duration format, failed to parse seconds"
        whole = value.lstrip("-").split(".", 1)[0].rstrip("s")
        if len(whole) > 12 or int(whole) > MAX_DURATION_SECONDS:  # int() of at most 12 digits
            return "Duration value out of range"  # wording assumed; the bound: duration.proto
        return None
    if not isinstance(value, str):
        return "Invalid data type for timestamp"
    if not re.search(r"(Z|[+-]\d{2}:\d{2})$", value):
        return "Illegal timestamp format; timestamps must end with 'Z' or have a valid timezone offset."
    if not _TIMESTAMP.match(value):
        return "Invalid time format: Failed to parse input"
    try:
        datetime.fromisoformat(value[:19])
    except ValueError:
        return "Invalid time format: Failed to parse input"
    return None
