"""Google's request-body schemas, vendored: which JSON fields each served method accepts.

The table (``data/request_schema.json``) is generated from Google's own definitions and is
what :mod:`strict_json` checks request bodies against: the operators check a ``job_spec=``
before any call, and the emulator refuses what Google's front end refuses (unknown names, wrong JSON types) and accepts everything Google accepts,
including fields our pydantic models lack (network, encryptionSpec, reservationAffinity, ...).

Sources, both Google's and both only needed to *regenerate* (dev time, never at run time):

* the aiplatform v1 discovery document shipped in google-api-python-client
  (``googleapiclient/discovery_cache/documents/aiplatform.v1.json``): the schemas, their
  fields, JSON types and enum names;
* the protos of google-cloud-aiplatform (``aiplatform_v1`` descriptors): each field's proto
  name (Google's JSON parser accepts it as well as the lowerCamelCase name), enum numbers,
  oneof groups, and the proto type names Google's error messages quote.

    python -m airflow_gpu_sched.vertex.request_schema --regenerate

rewrites the table; ``tests/test_strict_json.py`` fails if it differs from what the installed
discovery document and protos give.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import functools
import json
import sys
from importlib import resources
from typing import Any

TABLE = "request_schema.json"

# Served methods whose request carries a body: (discovery method id, body schema, proto message
# of the body, the request field the body fills). The last is the HTTP rule's `body:` in the
# GAPIC REST transports (services/*/transports/rest_base.py, e.g. _BaseCreateCustomJob:
# 'body': 'custom_job'; cancels use 'body': '*', the whole request). Google's error paths start
# with it ('custom_job.job_spec...'); for '*' they start at the body's own fields.
METHODS: list[tuple[str, str, str, str]] = [
    ("customJobs.create", "GoogleCloudAiplatformV1CustomJob", "CustomJob", "custom_job"),
    ("customJobs.cancel", "GoogleCloudAiplatformV1CancelCustomJobRequest", "CancelCustomJobRequest", "*"),
    ("hyperparameterTuningJobs.create", "GoogleCloudAiplatformV1HyperparameterTuningJob",
     "HyperparameterTuningJob", "hyperparameter_tuning_job"),
    ("hyperparameterTuningJobs.cancel", "GoogleCloudAiplatformV1CancelHyperparameterTuningJobRequest",
     "CancelHyperparameterTuningJobRequest", "*"),
    ("trainingPipelines.create", "GoogleCloudAiplatformV1TrainingPipeline", "TrainingPipeline", "training_pipeline"),
    ("trainingPipelines.cancel", "GoogleCloudAiplatformV1CancelTrainingPipelineRequest",
     "CancelTrainingPipelineRequest", "*"),
    ("persistentResources.create", "GoogleCloudAiplatformV1PersistentResource", "PersistentResource",
     "persistent_resource"),
    ("persistentResources.patch", "GoogleCloudAiplatformV1PersistentResource", "PersistentResource",
     "persistent_resource"),
]

# Served methods whose answers the emulator prints as proto3 JSON from this table
# (emulator/proto_json.py): each method's `response` schema in the discovery document
# (resources.projects.locations.<collection>[.operations].methods.<verb>).
RESPONSES: list[str] = [
    f"{collection}.{verb}" for collection in ("customJobs", "hyperparameterTuningJobs", "trainingPipelines")
    for verb in ("create", "get", "list", "cancel", "delete")
] + ["persistentResources.create", "persistentResources.get", "persistentResources.list",
     "persistentResources.patch", "persistentResources.delete", "operations.get",
     "persistentResources.operations.get", "models.get", "models.list"]
# The types an Operation's `metadata` / `response` (google.protobuf.Any) hold in those answers
ANY_TYPES: list[str] = ["GoogleCloudAiplatformV1CreatePersistentResourceOperationMetadata",
                        "GoogleCloudAiplatformV1UpdatePersistentResourceOperationMetadata",
                        "GoogleCloudAiplatformV1DeleteOperationMetadata", "GoogleProtobufEmpty"]

# discovery (type, format) -> the kind strict_json checks
_SCALARS = {
    ("string", None): "string", ("string", "byte"): "bytes", ("string", "int64"): "int64",
    ("string", "uint64"): "uint64", ("integer", "int32"): "int32", ("integer", "uint32"): "uint32",
    ("number", "double"): "double", ("number", "float"): "float", ("boolean", None): "bool",
    ("string", "google-datetime"): "timestamp", ("string", "google-duration"): "duration",
    ("string", "google-fieldmask"): "fieldmask", ("any", None): "value",
}


def read_table(table: str) -> dict:
    """A vendored table of ``vertex/data/`` (this module's, :mod:`.compute_schema`'s)."""
    return json.loads((resources.files("airflow_gpu_sched.vertex") / "data" / table).read_text(encoding="utf-8"))


def discovery_document_path(name: str) -> str:
    """A discovery document of the google-api-python-client wheel (dev-time only: the emulator
    never imports it)."""
    import googleapiclient

    return str(resources.files(googleapiclient) / "discovery_cache" / "documents" / name)


@functools.lru_cache(maxsize=1)
def load() -> dict:
    """The vendored table: {"source", "methods": {rpc: {schema, body}}, "schemas": {...}}."""
    return read_table(TABLE)


# ---------------------------------------------------------------------- generation (dev only)

def _discovery_path() -> str:
    return discovery_document_path("aiplatform.v1.json")


def generate(discovery: dict | None = None) -> dict:
    """Build the table from the discovery document and the aiplatform_v1 protos."""
    from google.cloud import aiplatform_v1  # dev-time only

    if discovery is None:
        with open(_discovery_path(), encoding="utf-8") as fh:
            discovery = json.load(fh)
    schemas_in = discovery["schemas"]
    out: dict[str, dict] = {}

    def field_entry(prop: dict, fdesc: Any, schema_name: str, json_name: str) -> dict:
        entry: dict[str, Any] = {"proto": _proto_name(fdesc, json_name)}
        if (fdesc is not None and fdesc.has_presence and fdesc.message_type is None
                and prop.get("type") != "array"):
            # proto3 `optional` or a oneof member: printed even at its default (proto3 JSON)
            entry["presence"] = True
        if prop.get("type") == "array":
            entry["repeated"] = True
            prop = prop["items"]
        elif (prop.get("type") == "object" and "additionalProperties" in prop
              and fdesc is not None and fdesc.message_type is not None
              and fdesc.message_type.GetOptions().map_entry):
            entry["map"] = True
            prop = prop["additionalProperties"]
            fdesc = fdesc.message_type.fields_by_name["value"]
        if "$ref" in prop:
            entry["ref"] = prop["$ref"]
            walk(prop["$ref"], fdesc.message_type if fdesc is not None else None)
        elif "enum" in prop:
            entry["kind"] = "enum"
            etype = fdesc.enum_type if fdesc is not None else None
            entry["enumType"] = etype.full_name if etype is not None else None
            numbers = {v.name: v.number for v in etype.values} if etype is not None else {}
            entry["enum"] = {name: numbers.get(name) for name in prop["enum"]}
        elif prop.get("type") == "object":
            # google.protobuf.Struct / Any (free-form objects in the discovery document)
            entry["kind"] = "struct"
            if fdesc is not None and fdesc.message_type is not None \
                    and fdesc.message_type.full_name == "google.protobuf.Any":
                entry["any"] = True  # {"@type": ..., the fields of that type}
        else:
            key = (prop.get("type"), prop.get("format"))
            if key not in _SCALARS:
                raise ValueError(f"{schema_name}.{json_name}: unhandled discovery type {key}")
            entry["kind"] = _SCALARS[key]
        return entry

    def walk(name: str, desc: Any) -> None:
        if name in out:
            return
        schema = schemas_in[name]
        record: dict[str, Any] = {"type": desc.full_name if desc is not None else None, "fields": {}}
        out[name] = record
        by_json = {f.json_name: f for f in desc.fields} if desc is not None else {}
        for json_name, prop in sorted(schema.get("properties", {}).items()):
            record["fields"][json_name] = field_entry(prop, by_json.get(json_name), name, json_name)
        # oneof groups (the discovery document does not say which fields exclude each other);
        # proto3 `optional` makes a synthetic oneof "_<field>" of one field: not a choice
        oneofs = {}
        for oneof in (desc.oneofs if desc is not None else []):
            members = [f.json_name for f in oneof.fields if f.json_name in record["fields"]]
            if len(members) > 1 or (members and oneof.name != f"_{oneof.fields[0].name}"):
                oneofs[oneof.name] = members
        if oneofs:
            record["oneofs"] = oneofs

    methods = {}
    for rpc, schema_name, message, body in METHODS:
        walk(schema_name, getattr(aiplatform_v1, message).pb().DESCRIPTOR)
        methods[rpc] = {"schema": schema_name, "body": body}
    responses = {}
    for rpc in RESPONSES:
        schema_name = _discovery_method(discovery, rpc)["response"]["$ref"]
        walk(schema_name, _descriptor(schema_name))
        responses[rpc] = schema_name
    for schema_name in ANY_TYPES:
        walk(schema_name, _descriptor(schema_name))
    return {
        "source": {"discovery": f"aiplatform.v1.json revision {discovery.get('revision')}",
                   "protos": "google-cloud-aiplatform aiplatform_v1",
                   "regenerate": "python -m airflow_gpu_sched.vertex.request_schema --regenerate"},
        "methods": methods,
        "responses": responses,
        "schemas": dict(sorted(out.items())),
    }


def _discovery_method(discovery: dict, rpc: str) -> dict:
    """``persistentResources.operations.get`` -> resources.projects.locations.persistentResources
    .resources.operations.methods.get of the discovery document."""
    *collections, verb = rpc.split(".")
    node = discovery["resources"]["projects"]["resources"]["locations"]
    for collection in collections:
        node = node["resources"][collection]
    return node["methods"][verb]


def _descriptor(schema_name: str) -> Any:
    """The proto descriptor of a discovery schema name (dev time only)."""
    from google.cloud import aiplatform_v1
    from google.longrunning import operations_pb2
    from google.protobuf import empty_pb2

    if schema_name == "GoogleLongrunningOperation":
        return operations_pb2.Operation.DESCRIPTOR
    if schema_name == "GoogleProtobufEmpty":
        return empty_pb2.Empty.DESCRIPTOR
    return getattr(aiplatform_v1, schema_name.removeprefix("GoogleCloudAiplatformV1")).pb().DESCRIPTOR


def _proto_name(fdesc: Any, json_name: str) -> str:
    if fdesc is None:  # a field newer than the installed protos: proto3's camel -> snake rule
        return _snake(json_name)
    # proto-plus appends "_" to names that are Python keywords (type_, exec_); the proto's is bare
    return fdesc.name[:-1] if fdesc.name.endswith("_") and not json_name.endswith("_") else fdesc.name


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def dumps(table: dict) -> str:
    # one schema per line: compact, and a regeneration diff shows which schema changed
    lines = ['{"source":' + json.dumps(table["source"], sort_keys=True) + ",",
             '"methods":' + json.dumps(table["methods"], sort_keys=True) + ","]
    if "responses" in table:  # this module's table; compute_schema's has none
        lines.append('"responses":' + json.dumps(table["responses"], sort_keys=True) + ",")
    lines.append('"schemas":{')
    items = list(table["schemas"].items())
    for i, (name, schema) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(json.dumps(name) + ":" + json.dumps(schema, sort_keys=True, separators=(",", ":")) + comma)
    lines.append("}}")
    return "\n".join(lines) + "\n"


def regenerate_main(argv: list[str], module: str, table: str, generate_table: Any) -> int:
    """``python -m <module> --regenerate``: write ``vertex/data/<table>`` from ``generate_table()``
    (this module's table and :mod:`.compute_schema`'s)."""
    if argv != ["--regenerate"]:
        print(f"usage: python -m {module} --regenerate", file=sys.stderr)
        return 2
    path = resources.files("airflow_gpu_sched.vertex") / "data" / table
    text = dumps(generate_table())
    with open(str(path), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {path} ({len(text)} bytes)")
    return 0


def main(argv: list[str]) -> int:
    return regenerate_main(argv, "airflow_gpu_sched.vertex.request_schema", TABLE, generate)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
