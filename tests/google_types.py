"""Check recorded Vertex exchanges against Google's own proto types (tests only: imports the SDK).

Each exchange (see ``airflow_gpu_sched/emulator/traffic.py``) is checked so:

* a request body parses, with ``json_format.Parse(..., ignore_unknown_fields=False)``, into the
  body type of its rpc (``customJobs.create`` -> ``google.cloud.aiplatform.v1.CustomJob``, ...):
  the REST mapping's ``body:`` field of each rpc in ``job_service.proto`` & co;
* a 2xx response body parses into the rpc's response type (``ListCustomJobsResponse``,
  ``google.longrunning.Operation``, ``google.protobuf.Empty`` for a cancel, ``cloudquotas.v1.QuotaInfo``);
  ``Any`` fields (an Operation's ``metadata`` / ``response``, a Status's ``details``) must name a
  type Google defines, and their contents parse strictly too;
* a training pipeline's ``trainingTaskInputs`` (a ``google.protobuf.Value``, free-form to the proto)
  parses into ``CustomJobSpec`` when its definition is ``custom_task``: the fields Google's SDK puts
  there (``training_jobs.py``, ``_prepare_training_task_inputs_and_output_dir``) are CustomJobSpec's;
* an error body is ``{"error": {code, message, status, details}}`` (Google's JSON error format,
  https://cloud.google.com/apis/design/errors#http_mapping): ``code`` is the HTTP status, ``status``
  a ``google.rpc.Code`` name whose HTTP mapping (``google/rpc/code.proto``) is that status, and
  ``{message, details}`` parses into ``google.rpc.Status``;
* a 2xx response is also in the canonical proto3 JSON form Google's servers write (what
  ``json_format.MessageToDict`` gives back for the parsed message, with its default settings):
  int64 as strings, enums as names, field names in lowerCamelCase, and **no field without
  presence at its default** (``false``, 0, ``""``, an enum's 0, an empty list or map: real Vertex
  answers an operation not yet done with no ``done`` key, an idle pool with no
  ``usedReplicaCount``, an empty list with ``{}``; recorded, issue 40). Printing with
  ``always_print_fields_with_no_presence=True`` would hide a default the emulator writes and
  Google does not; a parser that accepts both forms would hide that drift. Timestamps compare
  as instants;
* every query parameter is one the method declares in the aiplatform v1 discovery document (or a
  standard one); quota and Cloud Logging rpcs are not in that document and are skipped (their
  bodies are checked against Cloud Quotas' and logging v2's protos all the same).

    violations = traffic_violations(emulator.traffic())
    assert violations == [], format_violations(violations)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import google.rpc
from google.cloud import aiplatform_v1 as aip
from google.cloud import cloudquotas_v1 as quotas
from google.cloud.billing_v1.types import ListSkusResponse
from google.cloud.logging_v2.types import ListLogEntriesRequest, ListLogEntriesResponse
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2  # noqa: F401 (registers ErrorInfo & co for Any)

from tests.conformance import load_discovery

__all__ = ["Violation", "RPC_TYPES", "canonical_dict", "exchange_violations", "format_violations", "traffic_violations"]


CUSTOM_TASK = "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
_EMPTY = empty_pb2.Empty
_OPERATION = operations_pb2.Operation

# rpc -> (request body type or None, 2xx response type). Body types: the `body:` of each rpc's
# google.api.http rule (create: the resource; cancel: "*", i.e. the Cancel...Request).
RPC_TYPES: dict[str, tuple[Any, Any]] = {
    "customJobs.create": (aip.CustomJob, aip.CustomJob),
    "customJobs.get": (None, aip.CustomJob),
    "customJobs.list": (None, aip.ListCustomJobsResponse),
    "customJobs.cancel": (aip.CancelCustomJobRequest, _EMPTY),
    "customJobs.delete": (None, _OPERATION),
    "hyperparameterTuningJobs.create": (aip.HyperparameterTuningJob, aip.HyperparameterTuningJob),
    "hyperparameterTuningJobs.get": (None, aip.HyperparameterTuningJob),
    "hyperparameterTuningJobs.list": (None, aip.ListHyperparameterTuningJobsResponse),
    "hyperparameterTuningJobs.cancel": (aip.CancelHyperparameterTuningJobRequest, _EMPTY),
    "hyperparameterTuningJobs.delete": (None, _OPERATION),
    "trainingPipelines.create": (aip.TrainingPipeline, aip.TrainingPipeline),
    "trainingPipelines.get": (None, aip.TrainingPipeline),
    "trainingPipelines.list": (None, aip.ListTrainingPipelinesResponse),
    "trainingPipelines.cancel": (aip.CancelTrainingPipelineRequest, _EMPTY),
    "trainingPipelines.delete": (None, _OPERATION),
    "persistentResources.create": (aip.PersistentResource, _OPERATION),
    "persistentResources.get": (None, aip.PersistentResource),
    "persistentResources.list": (None, aip.ListPersistentResourcesResponse),
    "persistentResources.delete": (None, _OPERATION),
    "persistentResources.patch": (aip.PersistentResource, _OPERATION),
    "operations.get": (None, _OPERATION),
    "models.get": (None, aip.Model),
    "models.list": (None, aip.ListModelsResponse),
    "quotaInfos.get": (None, quotas.QuotaInfo),
    "quotaInfos.list": (None, quotas.ListQuotaInfosResponse),
    # Cloud Logging v2 (google/logging/v2/logging.proto: ListLogEntries, body "*")
    "entries.list": (ListLogEntriesRequest, ListLogEntriesResponse),
    # Cloud Billing catalog v1 (google/cloud/billing/v1/cloud_catalog.proto: ListSkus, GET)
    "skus.list": (None, ListSkusResponse),
}

# discovery document methods under projects.locations (quota rpcs live in another API)
_DISCOVERY_METHOD = {rpc: rpc for rpc in RPC_TYPES if not rpc.startswith(("quotaInfos.", "entries.", "skus."))}
# parameters every Google API method takes (the discovery document's top-level `parameters`)
_STANDARD_QUERY = {"$alt", "$.xgafv"}


@dataclass(frozen=True)
class Violation:
    rpc: str | None
    path: str
    part: str  # "request", "response", "error", "query", "rpc"
    field: str  # where in the message ("CustomJob.jobSpec", a parameter name, ...)
    message: str

    def __str__(self) -> str:
        return f"{self.rpc} {self.path} [{self.part}] {self.field}: {self.message}"


def format_violations(violations: list[Violation]) -> str:
    return "\n".join(str(v) for v in violations)


def _raw(message_type: Any) -> Any:
    """A fresh raw protobuf message: json_format needs it, not a proto-plus wrapper."""
    if isinstance(message_type, type) and hasattr(message_type, "pb") and hasattr(message_type, "meta"):
        return message_type.pb(message_type())
    return message_type()


def _parse_errors(text: str, message_type: Any) -> list[tuple[str, str]]:
    """[(field, message)] for every reason ``text`` does not parse strictly into ``message_type``."""
    message = _raw(message_type)
    try:
        json_format.Parse(text, message, ignore_unknown_fields=False)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        first = str(exc).splitlines()[0]  # json_format ends it with ` at "Path.to[0].field".` or ` at Path.`
        found = re.search(r' at "?([\w.\[\]]+?)"?\.?$', first)
        return [(found.group(1) if found else message.DESCRIPTOR.name, first)]
    return _nested_errors(text, message)


# rpcs whose service prints the defaults of fields without presence: Cloud Billing's catalog
# (observed: a real Compute Engine skus answer carries "summary": "", "startUsageAmount": 0,
# "units": "0"; docs/fidelity.md "Cloud Billing catalog")
PRINTS_DEFAULTS = frozenset({"skus.list"})


def _canonical_errors(text: str, message_type: Any, rpc: str | None = None) -> list[tuple[str, str]]:
    """Where the JSON differs from the canonical encoding of what it parses into."""
    message = _raw(message_type)
    json_format.Parse(text, message, ignore_unknown_fields=False)
    problems: list[tuple[str, str]] = []
    canonical = canonical_dict(message, prints_defaults=rpc in PRINTS_DEFAULTS)
    _compare(json.loads(text), canonical, message.DESCRIPTOR.name, problems)
    return problems


def canonical_dict(message: Any, prints_defaults: bool = False) -> dict:
    """A message as Google's servers print it: proto3 JSON with the default settings (fields
    without presence at their default left out; fields with presence kept when set), or with
    the defaults printed for a service that prints them (``PRINTS_DEFAULTS``)."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=prints_defaults)


def _compare(sent: Any, canonical: Any, where: str, problems: list[tuple[str, str]]) -> None:
    if isinstance(sent, dict) and isinstance(canonical, dict):
        for key, value in sent.items():
            if key in canonical:
                _compare(value, canonical[key], f"{where}.{key}", problems)
            else:
                problems.append((f"{where}.{key}", f"not in the canonical form: a default Google does not print "
                                                    f"({value!r}), or a proto field name {key!r}?"))
    elif isinstance(sent, list) and isinstance(canonical, list) and len(sent) == len(canonical):
        for i, (a, b) in enumerate(zip(sent, canonical)):
            _compare(a, b, f"{where}[{i}]", problems)
    elif sent != canonical and not _same_instant(sent, canonical):
        if not (isinstance(sent, (int, float)) and isinstance(canonical, (int, float)) and sent == canonical):
            problems.append((where, f"{sent!r} is written {canonical!r} by Google's encoding"))


def _same_instant(a: Any, b: Any) -> bool:
    from datetime import datetime

    try:
        return isinstance(a, str) and isinstance(b, str) and \
            datetime.fromisoformat(a.replace("Z", "+00:00")) == datetime.fromisoformat(b.replace("Z", "+00:00"))
    except ValueError:
        return False


def _nested_errors(text: str, message: Any) -> list[tuple[str, str]]:
    """Value fields Google types elsewhere: a custom_task pipeline's trainingTaskInputs."""
    name = message.DESCRIPTOR.full_name
    pipelines = []
    if name == "google.cloud.aiplatform.v1.TrainingPipeline":
        pipelines = [("TrainingPipeline", json.loads(text))]
    elif name == "google.cloud.aiplatform.v1.ListTrainingPipelinesResponse":
        pipelines = [(f"trainingPipelines[{i}]", p) for i, p in enumerate(json.loads(text).get("trainingPipelines", []))]
    errors = []
    for where, pipeline in pipelines:
        inputs = pipeline.get("trainingTaskInputs")
        if pipeline.get("trainingTaskDefinition") == CUSTOM_TASK and inputs is not None:
            errors += [(f"{where}.trainingTaskInputs:{field}", msg)
                       for field, msg in _parse_errors(json.dumps(inputs), aip.CustomJobSpec)]
    return errors


@lru_cache(maxsize=1)
def http_of_code() -> dict[str, int]:
    """google.rpc.Code name -> HTTP status, read from the ``HTTP Mapping:`` comments of code.proto."""
    text = (Path(google.rpc.__path__[0]) / "code.proto").read_text()
    pairs = re.findall(r"HTTP Mapping: (\d+)[^\n]*\n(?:\s*//[^\n]*\n)*\s*([A-Z_]+) = \d+;", text)
    return {name: int(status) for status, name in pairs}


def _error_violations(text: str | None, status: int) -> list[tuple[str, str]]:
    try:
        body = json.loads(text or "")
    except ValueError:
        return [("<body>", f"error body is not JSON: {text!r}")]
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return [("<body>", f"error body is not {{\"error\": {{...}}}}: {text!r}")]
    error = body["error"]
    problems = [(f"error.{k}", "not a field of Google's JSON error") for k in error
                if k not in ("code", "message", "status", "details")]
    if error.get("code") != status:
        problems.append(("error.code", f"{error.get('code')!r} is not the HTTP status {status}"))
    name = error.get("status")
    if name not in code_pb2.Code.keys() or name == "OK":
        problems.append(("error.status", f"{name!r} is not a google.rpc.Code name"))
    elif http_of_code().get(name) != status:
        problems.append(("error.status", f"{name} maps to HTTP {http_of_code().get(name)}, not {status}"))
    if not error.get("message"):
        problems.append(("error.message", "missing or empty"))
    as_status = {"code": code_pb2.Code.Value(name) if name in code_pb2.Code.keys() else 0,
                 **{k: error[k] for k in ("message", "details") if k in error}}
    problems += _parse_errors(json.dumps(as_status), status_pb2.Status)
    return problems


def _query_violations(rpc: str, query: list) -> list[tuple[str, str]]:
    method = _discovery_method(rpc)
    if method is None:
        return []
    allowed = set(method.get("parameters", {})) | set(load_discovery().get("parameters", {})) | _STANDARD_QUERY
    return [(key, f"not a parameter of {method['id']}") for key, _ in query if key not in allowed]


@lru_cache(maxsize=None)
def _discovery_method(rpc: str) -> dict | None:
    if rpc not in _DISCOVERY_METHOD:
        return None
    collection, verb = rpc.rsplit(".", 1)
    resource = load_discovery()["resources"]["projects"]["resources"]["locations"]["resources"][collection]
    return resource["methods"][verb]


def _rpc_types(rpc: str | None) -> tuple[Any, Any] | None:
    if rpc in RPC_TYPES:
        return RPC_TYPES[rpc]
    if rpc and rpc.endswith("operations.get"):  # operations served under other collections too
        return None, _OPERATION
    return None


def exchange_violations(exchange: dict) -> list[Violation]:
    rpc, path, status = exchange["rpc"], exchange["path"], exchange["status"]
    found: list[Violation] = []

    def add(part: str, problems: list[tuple[str, str]]) -> None:
        found.extend(Violation(rpc, path, part, field, message) for field, message in problems)

    types = _rpc_types(rpc)
    if types is None:
        add("rpc", [("<rpc>", f"no Google types known for rpc {rpc!r} ({exchange['method']} /v1/{path})")])
        if status >= 400:
            add("error", _error_violations(exchange["responseBody"], status))
        return found
    request_type, response_type = types
    add("query", _query_violations(rpc, exchange.get("query") or []))
    if exchange.get("requestBody") is not None:
        if request_type is None:
            add("request", [("<body>", "this rpc takes no request body")])
        else:
            add("request", _parse_errors(exchange["requestBody"], request_type))
    if status >= 400:
        add("error", _error_violations(exchange["responseBody"], status))
    elif exchange.get("responseBody") is None:
        add("response", [("<body>", "empty response body (an Empty is `{}`)")])
    else:
        problems = _parse_errors(exchange["responseBody"], response_type)
        add("response", problems or _canonical_errors(exchange["responseBody"], response_type, rpc))
    return found


def traffic_violations(exchanges: list[dict]) -> list[Violation]:
    return [v for exchange in exchanges for v in exchange_violations(exchange)]
