"""Compute Engine's request-body schema for the reservation methods, vendored (the emulator
refuses a ``reservations.insert`` body with a name Compute's front end does not know).

Generated from the compute v1 discovery document shipped in google-api-python-client
(``googleapiclient/discovery_cache/documents/compute.v1.json``), in the same table shape as
:mod:`request_schema` so that :func:`strict_json.body_errors` checks it. No protos are needed:
compute's JSON names are its proto names in lowerCamelCase (the proto name is derived by
proto3's camel -> snake rule), enum numbers are not known (names only: the discovery
document lists Compute's enums as strings, and the compute API answers them as names).

    python -m airflow_gpu_sched.vertex.compute_schema --regenerate

rewrites ``data/compute_schema.json``; ``tests/test_reservations.py`` fails if it differs from
what the installed discovery document gives.

May import: vertex; never airflow.
"""

from __future__ import annotations

import functools
import json
import sys

TABLE = "compute_schema.json"
# (discovery method id, body schema, the request field the body fills: compute's GAPIC
# InsertReservationRequest carries it as `reservation_resource`)
METHODS = [("reservations.insert", "Reservation", "reservation_resource")]

_SCALARS = {
    ("string", None): "string", ("string", "byte"): "bytes", ("string", "int64"): "int64",
    ("string", "uint64"): "uint64", ("integer", "int32"): "int32", ("integer", "uint32"): "uint32",
    ("number", "double"): "double", ("number", "float"): "float", ("boolean", None): "bool",
    ("string", "google-datetime"): "string", ("any", None): "value",
}


@functools.lru_cache(maxsize=1)
def load() -> dict:
    from airflow_gpu_sched.vertex.request_schema import read_table

    return read_table(TABLE)


def _discovery_path() -> str:
    from airflow_gpu_sched.vertex.request_schema import discovery_document_path

    return discovery_document_path("compute.v1.json")


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def generate(discovery: dict | None = None) -> dict:
    if discovery is None:
        with open(_discovery_path(), encoding="utf-8") as fh:
            discovery = json.load(fh)
    schemas_in = discovery["schemas"]
    out: dict[str, dict] = {}

    def entry(prop: dict, where: str, json_name: str) -> dict:
        found: dict = {"proto": _snake(json_name)}
        if prop.get("type") == "array":
            found["repeated"] = True
            prop = prop["items"]
        elif prop.get("type") == "object" and "additionalProperties" in prop:
            found["map"] = True
            prop = prop["additionalProperties"]
        if "$ref" in prop:
            found["ref"] = prop["$ref"]
            walk(prop["$ref"])
        elif "enum" in prop:
            found.update(kind="enum", enumType=f"google.cloud.compute.v1.{where}.{json_name[0].upper()}"
                                                f"{json_name[1:]}", enum={name: None for name in prop["enum"]})
        elif prop.get("type") == "object":
            found["kind"] = "struct"
        else:
            key = (prop.get("type"), prop.get("format"))
            if key not in _SCALARS:
                raise ValueError(f"{where}.{json_name}: unhandled discovery type {key}")
            found["kind"] = _SCALARS[key]
        return found

    def walk(name: str) -> None:
        if name in out:
            return
        record: dict = {"type": f"google.cloud.compute.v1.{name}", "fields": {}}
        out[name] = record
        for json_name, prop in sorted(schemas_in[name].get("properties", {}).items()):
            record["fields"][json_name] = entry(prop, name, json_name)

    methods = {}
    for rpc, schema, body in METHODS:
        walk(schema)
        methods[rpc] = {"schema": schema, "body": body}
    return {"source": {"discovery": f"compute.v1.json revision {discovery.get('revision')}",
                       "regenerate": "python -m airflow_gpu_sched.vertex.compute_schema --regenerate"},
            "methods": methods, "schemas": dict(sorted(out.items()))}


def main(argv: list[str]) -> int:
    from airflow_gpu_sched.vertex.request_schema import regenerate_main

    return regenerate_main(argv, "airflow_gpu_sched.vertex.compute_schema", TABLE, generate)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
