"""Check JSON values against schemas of the aiplatform v1 discovery document.

The discovery document is the one shipped inside google-api-python-client
(``googleapiclient/discovery_cache/documents/aiplatform.v1.json``), so the
emulator's wire format is checked against what the real client library knows.

    errors = conformance_errors(job_dict, "GoogleCloudAiplatformV1CustomJob")
    assert errors == []

Rules (applied recursively through ``$ref``, ``items`` and
``additionalProperties``):

* object keys must be declared properties of the schema, unless the schema is
  free-form (``additionalProperties`` -> values checked against it; neither
  ``properties`` nor ``additionalProperties`` -> anything goes);
* ``int64``/``uint64`` are JSON strings of digits (``-`` allowed for int64);
* ``google-datetime`` is an RFC 3339 string with ``Z`` or a UTC offset;
* ``google-duration`` matches ``^-?\\d+(\\.\\d{1,9})?s$``;
* ``enum`` values are one of the enum names;
* ``integer`` is a JSON int (not bool), ``number`` an int or float (not bool),
  ``boolean`` a bool, ``string`` a str, ``array`` a list, ``object`` a dict.

Error messages start with a dotted/indexed path such as
``jobSpec.workerPoolSpecs[0].replicaCount``.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from importlib import resources
from typing import Any

__all__ = ["conformance_errors", "load_discovery"]

_DOC = "aiplatform.v1.json"

_INT64 = re.compile(r"^-?\d+$")
_UINT64 = re.compile(r"^\d+$")
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_DATETIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1)}


@functools.lru_cache(maxsize=1)
def load_discovery() -> dict:
    """Return the parsed aiplatform v1 discovery document (cached)."""
    docs = resources.files("googleapiclient") / "discovery_cache" / "documents" / _DOC
    return json.loads(docs.read_text(encoding="utf-8"))


def conformance_errors(value: Any, schema_name: str) -> list[str]:
    """List every way ``value`` violates discovery schema ``schema_name``.

    Raises ``KeyError`` if the schema name does not exist in the document.
    """
    schemas = load_discovery()["schemas"]
    if schema_name not in schemas:
        raise KeyError(f"no schema {schema_name!r} in {_DOC}")
    errors: list[str] = []
    _check(value, {"$ref": schema_name}, "", schemas, errors)
    return errors


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _valid_datetime(text: str) -> bool:
    m = _DATETIME.match(text)
    if not m:
        return False
    date, clock, tz = m.groups()
    tz = "+00:00" if tz in "Zz" else tz
    try:
        datetime.fromisoformat(f"{date}T{clock}{tz}")
    except ValueError:
        return False
    return True


def _check(value: Any, schema: dict, path: str, schemas: dict, errors: list[str]) -> None:
    where = path or "<root>"
    name = None
    if "$ref" in schema:
        name = schema["$ref"]
        schema = schemas[name]
    kind = schema.get("type")

    def fail(msg: str) -> None:
        errors.append(f"{where}: {msg}")

    if kind == "any" or kind is None:
        return

    if kind == "object":
        if not isinstance(value, dict):
            fail(f"expected object, got {_type_name(value)}")
            return
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props and key in props:
                _check(item, props[key], _join(path, key), schemas, errors)
            elif extra is not None:
                _check(item, extra, _join(path, key), schemas, errors)
            elif props:
                errors.append(f"{_join(path, key)}: field {key!r} is not in {name or 'the schema'}")
            # no properties and no additionalProperties: free-form, anything goes
        return

    if kind == "array":
        if not isinstance(value, list):
            fail(f"expected array, got {_type_name(value)}")
            return
        items = schema.get("items", {})
        for i, item in enumerate(value):
            _check(item, items, f"{path}[{i}]", schemas, errors)
        return

    if kind == "boolean":
        if not isinstance(value, bool):
            fail(f"expected boolean, got {_type_name(value)}")
        return

    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            fail(f"expected integer ({schema.get('format', 'int')}), got {_type_name(value)}")
            return
        lo, hi = _INT_RANGES.get(schema.get("format", ""), (None, None))
        if lo is not None and not lo <= value <= hi:
            fail(f"{value} out of range for {schema['format']}")
        return

    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"expected number, got {_type_name(value)}")
        return

    if kind == "string":
        fmt = schema.get("format")
        if not isinstance(value, str):
            what = f"string ({fmt})" if fmt else "string"
            fail(f"expected {what}, got {_type_name(value)} {value!r}")
            return
        if fmt == "int64" and not _INT64.match(value):
            fail(f"expected int64 as a string of digits, got {value!r}")
        elif fmt == "uint64" and not _UINT64.match(value):
            fail(f"expected uint64 as a string of digits, got {value!r}")
        elif fmt == "google-datetime" and not _valid_datetime(value):
            fail(f"expected RFC 3339 timestamp with Z or offset, got {value!r}")
        elif fmt == "google-duration" and not _DURATION.match(value):
            fail(f"expected duration like '1.5s', got {value!r}")
        if "enum" in schema and value not in schema["enum"]:
            fail(f"{value!r} is not one of {', '.join(schema['enum'])}")
        return

    fail(f"schema has unsupported type {kind!r}")
