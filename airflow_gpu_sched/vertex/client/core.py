"""Everything the two clients share that does no I/O: URLs, request bodies, error mapping,
and the one retry classifier. The sync face (:mod:`.sync`) and the async face (:mod:`.aio`)
only send what this module builds and ask it what to do when a send fails.

May import: vertex; never airflow.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping, Protocol, TypeVar
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from airflow_gpu_sched.vertex import resource_names
from airflow_gpu_sched.vertex.billing import ListSkusResponse
from airflow_gpu_sched.vertex.client.errors import (
    AlreadyExistsError,
    AmbiguousCreateError,
    ApiRequestInfo,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    ServerError,
    UnavailableError,
    VertexApiError,
    VertexError,
    VertexTransportError,
)
from airflow_gpu_sched.vertex.job_type_models import (
    HyperparameterTuningJob,
    ListHyperparameterTuningJobsResponse,
    ListModelsResponse,
    ListQuotaInfosResponse,
    ListTrainingPipelinesResponse,
    Model,
    TrainingPipeline,
)
from airflow_gpu_sched.vertex.models import (
    AIPLATFORM_SERVICE,
    CustomJob,
    ListCustomJobsResponse,
    ListPersistentResourcesResponse,
    Operation,
    PersistentResource,
    Status,
    parse_duration,
)
from airflow_gpu_sched.vertex.reservations import ComputeOperation, Reservation, ReservationList
from airflow_gpu_sched.vertex.rules import (
    SpecError,
    check_persistent_resource,
    validate_custom_job,
    validate_training_pipeline,
    validate_tuning_job,
)

log = logging.getLogger("airflow_gpu_sched.client")  # the name users' logging configs know

T = TypeVar("T")

# --------------------------------------------------------------------------- endpoints

DEFAULT_API_ROOT = "https://{location}-aiplatform.googleapis.com/v1/"
_GLOBAL_API_ROOT = "https://aiplatform.googleapis.com/v1/"
CLOUD_QUOTAS_ROOT = "https://cloudquotas.googleapis.com/v1/"


def normalize_endpoint(api_endpoint: str) -> str:
    """``http://127.0.0.1:8123``, ``.../``, ``.../v1`` or ``.../v1/`` -> ``http://127.0.0.1:8123/v1/``.

    A bare host (``us-central1-aiplatform.googleapis.com``, the google-cloud client_options
    style) means https. Credentials in the URL (``user:pass@``) are refused: they would end
    up in error messages.
    """
    text = api_endpoint.strip()
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"api_endpoint {api_endpoint!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ValueError("api_endpoint must not carry credentials (user:password@); use a connection's key")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/v1/", "", ""))


def api_root(location: str, api_endpoint: str | None = None) -> str:
    """The ``.../v1/`` root for a location: regional host, or the override for every location."""
    if api_endpoint:
        return normalize_endpoint(api_endpoint)
    if location == "global":
        return _GLOBAL_API_ROOT
    if not re.fullmatch(r"[a-z0-9-]+", location or ""):
        raise ValueError(f"{location!r} is not a Vertex AI location (e.g. 'us-central1')")
    return DEFAULT_API_ROOT.format(location=location)


def quotas_root(api_endpoint: str | None = None) -> str:
    """The Cloud Quotas API's ``.../v1/`` root. Production (no override, or an override on a
    ``googleapis.com`` host such as a regional Vertex endpoint): ``https://cloudquotas.googleapis.com/v1/``.
    Any other override (the emulator, a proxy) serves Cloud Quotas on the same host:
    ``http://127.0.0.1:PORT`` -> ``http://127.0.0.1:PORT/v1/``."""
    return service_root("cloudquotas", api_endpoint)


def service_root(service: str, api_endpoint: str | None = None) -> str:
    """The ``.../v1/`` root of another Google API (``cloudquotas``, ``iamcredentials``,
    ``secretmanager``): ``https://{service}.googleapis.com/v1/`` without an override or with one
    on a ``googleapis.com`` host; any other override (the emulator, a proxy) serves it on the
    same host."""
    production = f"https://{service}.googleapis.com/v1/"
    if not api_endpoint:
        return production
    root = normalize_endpoint(api_endpoint)
    host = (urlsplit(root).hostname or "").lower()
    if host == "googleapis.com" or host.endswith(".googleapis.com"):
        return production
    return root


def compute_root(api_endpoint: str | None = None) -> str:
    """Compute Engine's ``.../compute/v1/`` root: ``https://compute.googleapis.com/compute/v1/``
    in production (no override, or one on a ``googleapis.com`` host); any other override (the
    emulator) serves it on the same host: ``http://127.0.0.1:PORT`` -> ``.../compute/v1/``."""
    root = service_root("compute", api_endpoint)
    if root.startswith("https://compute.googleapis.com/"):
        return "https://compute.googleapis.com/compute/v1/"
    return root[: -len("v1/")] + "compute/v1/"


def logging_root(api_endpoint: str | None = None) -> str:
    """Cloud Logging's ``.../v2/`` root: ``https://logging.googleapis.com/v2/``, or the same
    host as an override off ``googleapis.com`` (the emulator serves ``/v2/entries:list``)."""
    return service_root("logging", api_endpoint).removesuffix("v1/") + "v2/"


def is_loopback_http(api_endpoint: str | None) -> bool:
    """True for ``http://`` to localhost/127.0.0.0/8/::1: a local emulator, no credentials."""
    if not api_endpoint or not api_endpoint.strip().lower().startswith("http://"):
        return False
    return is_loopback_host(urlsplit(api_endpoint.strip()).hostname or "")


def is_loopback_host(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (the emulator binds only these unless told otherwise)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_transport(api_endpoint: str | None) -> None:
    """Refuse to send a bearer token over plain http anywhere but this machine."""
    if api_endpoint and api_endpoint.strip().lower().startswith("http://") and not is_loopback_http(api_endpoint):
        raise ValueError(
            f"api_endpoint {api_endpoint!r} is plain http to a remote host: an OAuth token sent there "
            "travels unencrypted and can be stolen. Use https, or http only to localhost/127.0.0.1 "
            "(an emulator, which needs no credentials)"
        )


def location_of(name: str) -> str:
    """``projects/p/locations/us-east4/customJobs/1`` -> ``us-east4``; the whole name checked
    against the one strict pattern (:mod:`airflow_gpu_sched.vertex.resource_names`)."""
    return resource_names.location(name)


# --------------------------------------------------------------------------- calls


class Safety(enum.Enum):
    """May the call be sent twice? Decides what the retry classifier allows."""

    IDEMPOTENT = "idempotent"  # get/list/cancel/delete, and creates that carry a client-chosen id
    CREATE = "create"  # customJobs.create: the server picks the id, a repeat makes a second job


@dataclass(frozen=True)
class ApiCall:
    rpc: str
    method: str
    path: str
    location: str
    params: Mapping[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    safety: Safety = Safety.IDEMPOTENT
    service: str = "aiplatform"  # "cloudquotas": sent to the Cloud Quotas API's root (quotas_root)


# Output-only fields: the service sets them; sending them back is at best ignored.
_JOB_OUTPUT_ONLY = ("name", "state", "createTime", "startTime", "endTime", "updateTime", "error",
                    "webAccessUris", "satisfiesPzs", "satisfiesPzi")
_RESOURCE_OUTPUT_ONLY = ("name", "state", "error", "createTime", "startTime", "updateTime")
_TUNING_OUTPUT_ONLY = _JOB_OUTPUT_ONLY + ("trials",)
_PIPELINE_OUTPUT_ONLY = ("name", "state", "createTime", "startTime", "endTime", "updateTime", "error",
                         "trainingTaskMetadata")
_MODEL_OUTPUT_ONLY = ("name", "versionId", "createTime", "updateTime", "versionCreateTime",
                      "versionUpdateTime", "trainingPipeline")


class VertexApi:
    """Builds an :class:`ApiCall` per REST method, and turns calls into URLs."""

    def __init__(self, api_endpoint: str | None = None):
        self.api_endpoint = normalize_endpoint(api_endpoint) if api_endpoint else None

    def url(self, call: ApiCall) -> str:
        if call.service == "cloudquotas":
            root = quotas_root(self.api_endpoint)
        elif call.service == "compute":
            root = compute_root(self.api_endpoint)
        elif call.service == "logging":
            root = logging_root(self.api_endpoint)
        elif call.service == "cloudbilling":
            root = service_root("cloudbilling", self.api_endpoint)
        else:
            resource_names.check_path(call.path, "request path")  # names from answers, ledger, XCom
            root = api_root(call.location, self.api_endpoint)
        path = quote(call.path.lstrip("/"), safe="/:@-._~")
        params = {k: v for k, v in call.params.items() if v is not None}
        return root + path + ("?" + urlencode(params, quote_via=quote) if params else "")

    def request_info(self, call: ApiCall) -> ApiRequestInfo:
        return ApiRequestInfo(method=call.method, url=self.url(call), rpc=call.rpc)

    # --- customJobs

    def create_custom_job(self, parent_or_project_location: str | tuple[str, str],
                          job: CustomJob | Mapping[str, Any]) -> ApiCall:
        """``parent`` is ``projects/P/locations/L`` or a ``(project, location)`` pair.
        The job is checked against :mod:`rules` first: a bad spec never reaches the wire."""
        parent = _parent(parent_or_project_location)
        job = job if isinstance(job, CustomJob) else CustomJob.model_validate(job)
        validate_custom_job(job)
        body = _without(job.to_api(), _JOB_OUTPUT_ONLY)
        return ApiCall("customJobs.create", "POST", f"{parent}/customJobs", location_of(parent),
                       body=body, safety=Safety.CREATE)

    def get_custom_job(self, name: str) -> ApiCall:
        return ApiCall("customJobs.get", "GET", name, location_of(name))

    def list_custom_jobs(self, parent: str, filter: str | None = None, page_size: int | None = None,
                         page_token: str | None = None, read_mask: str | None = None) -> ApiCall:
        params = {"filter": filter, "pageSize": page_size, "pageToken": page_token, "readMask": read_mask}
        return ApiCall("customJobs.list", "GET", f"{parent}/customJobs", location_of(parent), params=params)

    def cancel_custom_job(self, name: str) -> ApiCall:
        return ApiCall("customJobs.cancel", "POST", f"{name}:cancel", location_of(name), body={})

    def delete_custom_job(self, name: str) -> ApiCall:
        return ApiCall("customJobs.delete", "DELETE", name, location_of(name))

    # --- persistentResources

    def create_persistent_resource(self, parent: str, resource: PersistentResource | Mapping[str, Any],
                                   resource_id: str) -> ApiCall:
        # Safe to retry: the client picks the id, so a repeat gets 409 instead of a twin.
        resource = (resource if isinstance(resource, PersistentResource)
                    else PersistentResource.model_validate(resource))
        violations = check_persistent_resource(resource, resource_id)
        if violations:
            raise SpecError(violations, "persistent resource")
        body = _without(resource.to_api(), _RESOURCE_OUTPUT_ONLY)
        for pool in body.get("resourcePools", []):
            pool.pop("usedReplicaCount", None)
        return ApiCall("persistentResources.create", "POST", f"{parent}/persistentResources",
                       location_of(parent), params={"persistentResourceId": resource_id}, body=body)

    def get_persistent_resource(self, name: str) -> ApiCall:
        return ApiCall("persistentResources.get", "GET", name, location_of(name))

    def list_persistent_resources(self, parent: str, page_size: int | None = None,
                                  page_token: str | None = None) -> ApiCall:
        return ApiCall("persistentResources.list", "GET", f"{parent}/persistentResources", location_of(parent),
                       params={"pageSize": page_size, "pageToken": page_token})

    def delete_persistent_resource(self, name: str) -> ApiCall:
        return ApiCall("persistentResources.delete", "DELETE", name, location_of(name))

    # --- hyperparameterTuningJobs

    def create_hyperparameter_tuning_job(self, parent_or_project_location: str | tuple[str, str],
                                         job: HyperparameterTuningJob | Mapping[str, Any]) -> ApiCall:
        """Checked against :func:`rules.check_tuning_job` first; the server picks the id, so a
        create is not safe to repeat (like customJobs.create)."""
        parent = _parent(parent_or_project_location)
        job = job if isinstance(job, HyperparameterTuningJob) else HyperparameterTuningJob.model_validate(job)
        validate_tuning_job(job)
        body = _without(job.to_api(), _TUNING_OUTPUT_ONLY)
        return ApiCall("hyperparameterTuningJobs.create", "POST", f"{parent}/hyperparameterTuningJobs",
                       location_of(parent), body=body, safety=Safety.CREATE)

    def get_hyperparameter_tuning_job(self, name: str) -> ApiCall:
        return ApiCall("hyperparameterTuningJobs.get", "GET", name, location_of(name))

    def list_hyperparameter_tuning_jobs(self, parent: str, filter: str | None = None, page_size: int | None = None,
                                        page_token: str | None = None, read_mask: str | None = None) -> ApiCall:
        params = {"filter": filter, "pageSize": page_size, "pageToken": page_token, "readMask": read_mask}
        return ApiCall("hyperparameterTuningJobs.list", "GET", f"{parent}/hyperparameterTuningJobs",
                       location_of(parent), params=params)

    def cancel_hyperparameter_tuning_job(self, name: str) -> ApiCall:
        return ApiCall("hyperparameterTuningJobs.cancel", "POST", f"{name}:cancel", location_of(name), body={})

    def delete_hyperparameter_tuning_job(self, name: str) -> ApiCall:
        return ApiCall("hyperparameterTuningJobs.delete", "DELETE", name, location_of(name))

    # --- trainingPipelines

    def create_training_pipeline(self, parent_or_project_location: str | tuple[str, str],
                                 pipeline: TrainingPipeline | Mapping[str, Any]) -> ApiCall:
        """Checked against :func:`rules.check_training_pipeline` first; not safe to repeat."""
        parent = _parent(parent_or_project_location)
        pipeline = (pipeline if isinstance(pipeline, TrainingPipeline)
                    else TrainingPipeline.model_validate(pipeline))
        validate_training_pipeline(pipeline)
        body = _without(pipeline.to_api(), _PIPELINE_OUTPUT_ONLY)
        if "modelToUpload" in body:
            body["modelToUpload"] = _without(body["modelToUpload"], _MODEL_OUTPUT_ONLY)
        return ApiCall("trainingPipelines.create", "POST", f"{parent}/trainingPipelines", location_of(parent),
                       body=body, safety=Safety.CREATE)

    def get_training_pipeline(self, name: str) -> ApiCall:
        return ApiCall("trainingPipelines.get", "GET", name, location_of(name))

    def list_training_pipelines(self, parent: str, filter: str | None = None, page_size: int | None = None,
                                page_token: str | None = None, read_mask: str | None = None) -> ApiCall:
        params = {"filter": filter, "pageSize": page_size, "pageToken": page_token, "readMask": read_mask}
        return ApiCall("trainingPipelines.list", "GET", f"{parent}/trainingPipelines", location_of(parent),
                       params=params)

    def cancel_training_pipeline(self, name: str) -> ApiCall:
        return ApiCall("trainingPipelines.cancel", "POST", f"{name}:cancel", location_of(name), body={})

    def delete_training_pipeline(self, name: str) -> ApiCall:
        return ApiCall("trainingPipelines.delete", "DELETE", name, location_of(name))

    # --- models

    def get_model(self, name: str) -> ApiCall:
        """``name`` is ``projects/P/locations/L/models/ID`` (default version) or ``...ID@VERSION``."""
        return ApiCall("models.get", "GET", name, location_of(name))

    def list_models(self, parent: str, filter: str | None = None, page_size: int | None = None,
                    page_token: str | None = None, read_mask: str | None = None) -> ApiCall:
        params = {"filter": filter, "pageSize": page_size, "pageToken": page_token, "readMask": read_mask}
        return ApiCall("models.list", "GET", f"{parent}/models", location_of(parent), params=params)

    # --- Cloud Quotas (cloudquotas.googleapis.com)

    def list_quota_infos(self, project: str, service: str = AIPLATFORM_SERVICE, page_size: int | None = None,
                         page_token: str | None = None) -> ApiCall:
        """``GET v1/projects/P/locations/global/services/SERVICE/quotaInfos`` on the Cloud Quotas
        API (see :func:`quotas_root`). A 403 surfaces as :class:`PermissionDeniedError`."""
        if not project or "/" in project:
            raise ValueError(f"{project!r} is not a project id")
        return ApiCall("quotaInfos.list", "GET", f"projects/{project}/locations/global/services/{service}/quotaInfos",
                       "global", params={"pageSize": page_size, "pageToken": page_token}, service="cloudquotas")

    # --- Cloud Billing catalog (cloudbilling.googleapis.com)

    def list_skus(self, service: str, page_size: int | None = None, page_token: str | None = None,
                  currency_code: str | None = None) -> ApiCall:
        """``GET v1/services/SERVICE/skus`` (cloudbilling v1 ``services.skus.list``): public prices."""
        if not re.fullmatch(r"[A-Za-z0-9-]+", service or ""):
            raise ValueError(f"{service!r} is not a billing service id (e.g. 'C7E2-9256-1C43')")
        params = {"pageSize": page_size, "pageToken": page_token, "currencyCode": currency_code}
        return ApiCall("skus.list", "GET", f"services/{service}/skus", "global", params=params,
                       service="cloudbilling")

    # --- Compute Engine reservations (compute.googleapis.com/compute/v1)

    def get_reservation(self, name: str) -> ApiCall:
        """``name``: ``projects/P/zones/Z/reservations/R``."""
        return ApiCall("reservations.get", "GET", name, _zone_region(name), service="compute")

    def list_reservations(self, project: str, zone: str, page_token: str | None = None,
                          max_results: int | None = None) -> ApiCall:
        params = {"pageToken": page_token, "maxResults": max_results}
        return ApiCall("reservations.list", "GET", f"projects/{project}/zones/{zone}/reservations",
                       zone.rsplit("-", 1)[0], params=params, service="compute")

    def insert_reservation(self, project: str, zone: str, reservation: Mapping[str, Any],
                           request_id: str | None = None) -> ApiCall:
        """Idempotent only with a ``request_id`` (compute's dedup key); the name is the client's."""
        return ApiCall("reservations.insert", "POST", f"projects/{project}/zones/{zone}/reservations",
                       zone.rsplit("-", 1)[0], params={"requestId": request_id}, body=dict(reservation),
                       service="compute")

    # --- operations

    def get_operation(self, name: str) -> ApiCall:
        return ApiCall("operations.get", "GET", name, location_of(name))


def _zone_region(name: str) -> str:
    parts = (name or "").split("/")
    if len(parts) < 6 or parts[0] != "projects" or parts[2] != "zones":
        raise ValueError(f"{name!r} is not a reservation name like 'projects/P/zones/Z/reservations/R'")
    return parts[3].rsplit("-", 1)[0]


def _parent(parent_or_project_location: str | tuple[str, str]) -> str:
    if isinstance(parent_or_project_location, tuple):
        project, location = parent_or_project_location
        return f"projects/{project}/locations/{location}"
    location_of(parent_or_project_location)  # raises on a malformed parent
    return parent_or_project_location.rstrip("/")


def _without(body: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in keys}


# --------------------------------------------------------------------------- errors

# google.rpc.Code: number -> (name, HTTP status), from vertex-api.md.
RPC_CODES: dict[int, tuple[str, int]] = {
    1: ("CANCELLED", 499), 2: ("UNKNOWN", 500), 3: ("INVALID_ARGUMENT", 400),
    4: ("DEADLINE_EXCEEDED", 504), 5: ("NOT_FOUND", 404), 6: ("ALREADY_EXISTS", 409),
    7: ("PERMISSION_DENIED", 403), 8: ("RESOURCE_EXHAUSTED", 429), 9: ("FAILED_PRECONDITION", 400),
    10: ("ABORTED", 409), 11: ("OUT_OF_RANGE", 400), 12: ("UNIMPLEMENTED", 501), 13: ("INTERNAL", 500),
    14: ("UNAVAILABLE", 503), 15: ("DATA_LOSS", 500), 16: ("UNAUTHENTICATED", 401),
}


def error_class(status_code: int) -> type[VertexApiError]:
    if status_code == 400:
        return InvalidArgumentError
    if status_code in (401, 403):
        return PermissionDeniedError
    if status_code == 404:
        return NotFoundError
    if status_code == 409:
        return AlreadyExistsError
    if status_code == 429:
        return QuotaExceededError
    if status_code == 503:
        return UnavailableError
    if status_code >= 500:
        return ServerError
    return VertexApiError


def error_from_response(status_code: int, body: bytes | str | Mapping[str, Any] | list | None,
                        request: ApiRequestInfo | None = None,
                        retry_after_header: str | None = None) -> VertexApiError:
    """Map an error response (Google's ``{"error": {code, message, status, details}}`` or
    anything else a proxy may send) to the matching :class:`VertexApiError` subclass."""
    data = _json_or_none(body)
    if isinstance(data, list) and data:  # some Google front ends wrap the error in a list
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        rpc_status = error.get("status") or None
        details = [d for d in error.get("details") or [] if isinstance(d, dict)]
    else:
        message, rpc_status, details = _text_of(body), None, []
    retry_after = parse_retry_after(retry_after_header)
    if retry_after is None:
        retry_after = _retry_info_delay(details)
    return error_class(status_code)(status_code, rpc_status, message or "(no message)", request, details,
                                    retry_after)


def error_from_status(status: Status, request: ApiRequestInfo | None = None) -> VertexApiError:
    """An rpc Status (an Operation's or a job's ``error``) as the matching error class."""
    name, http_status = RPC_CODES.get(status.code or 0, ("UNKNOWN", 500))
    return error_class(http_status)(http_status, name, status.message or "(no message)", request,
                                    status.details or [])


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After``: delay-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _retry_info_delay(details: list[dict[str, Any]]) -> float | None:
    for detail in details:
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo") and detail.get("retryDelay"):
            try:
                return max(0.0, parse_duration(detail["retryDelay"]).total_seconds())
            except ValueError:
                return None
    return None


def _json_or_none(body: Any) -> Any:
    if body is None or isinstance(body, (dict, list)):
        return body
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def _text_of(body: Any, limit: int = 300) -> str:
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body).decode("utf-8", errors="replace")
    elif isinstance(body, (dict, list)):
        body = json.dumps(body)
    text = " ".join(str(body or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, within a total time budget (seconds)."""

    initial: float = 1.0
    maximum: float = 30.0
    multiplier: float = 2.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if min(self.initial, self.maximum, self.deadline) < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy needs initial, maximum, deadline >= 0 and multiplier >= 1")

    def cap(self, attempt: int) -> float:
        """Largest delay after failed attempt number ``attempt`` (0 = the first failure)."""
        try:
            return min(self.maximum, self.initial * self.multiplier ** max(0, attempt))
        except OverflowError:
            return self.maximum

    def backoff(self, attempt: int, rng: _Rng) -> float:
        return rng.uniform(0, self.cap(attempt))


class _Rng(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


@dataclass(frozen=True)
class Retry:
    delay: float


@dataclass(frozen=True)
class GiveUp:
    error: VertexError  # what the face raises: the last error, or an AmbiguousCreateError


RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def next_step(call: ApiCall, error: VertexError, attempt: int, elapsed: float,
              policy: RetryPolicy, rng: _Rng) -> Retry | GiveUp:
    """The one retry classifier. ``attempt`` counts failures before this one (0 first);
    ``elapsed`` is seconds since the first send."""
    if isinstance(error, QuotaExceededError) and error.is_resource_quota:
        return GiveUp(error)  # GPUs over the region's quota: no retry frees them; the caller decides
    if call.safety is Safety.CREATE:
        # Retry a create only when the failure proves no job was made: a quota rejection,
        # or a connection that never opened. Anything else may have created the job.
        safe = (isinstance(error, QuotaExceededError)
                or (isinstance(error, VertexTransportError) and error.kind == "connect"))
        if not safe:
            if isinstance(error, (ServerError, VertexTransportError)):
                return GiveUp(AmbiguousCreateError(error))
            return GiveUp(error)
    elif not (isinstance(error, VertexTransportError)
              or (isinstance(error, VertexApiError) and error.status_code in RETRYABLE_STATUS)):
        return GiveUp(error)
    remaining = policy.deadline - elapsed
    if remaining <= 0:
        return GiveUp(error)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None and retry_after > remaining:
        return GiveUp(error)  # the server asked for more time than the budget has left
    # The last try lands on the deadline, not before it: callers rely on "not before the window".
    delay = min(policy.backoff(attempt, rng), remaining)
    return Retry(max(delay, retry_after or 0.0))


class RetryState:
    """Counts attempts and time for one logical call; both faces loop on :meth:`after`."""

    def __init__(self, call: ApiCall, policy: RetryPolicy, rng: _Rng,
                 clock: Callable[[], float] = time.monotonic):
        self.call, self.policy, self.rng, self.clock = call, policy, rng, clock
        self.attempt = 0
        self.started = clock()

    def after(self, error: VertexError) -> Retry | GiveUp:
        step = next_step(self.call, error, self.attempt, self.clock() - self.started, self.policy, self.rng)
        if isinstance(step, Retry):
            self.attempt += 1
            log.info("retrying %s after %s (attempt %d) in %.2fs",
                     self.call.rpc, _short(error), self.attempt, step.delay)
        return step


def _short(error: VertexError) -> str:
    if isinstance(error, VertexApiError):
        return f"{error.status_code} {error.rpc_status or ''}".strip()
    if isinstance(error, VertexTransportError):
        return f"{error.kind} error"
    return type(error).__name__


# --------------------------------------------------------------------------- the method list


class ClientMethods:
    """The client methods both faces share. Each body is ``self._execute(call, parse)``: the
    sync face returns the parsed value, the async face returns an awaitable of it, so
    ``client.get_custom_job(name)`` and ``await aclient.get_custom_job(name)`` both work.
    Paging iterators and ``wait_operation`` differ in kind and live in each face."""

    api: VertexApi
    project: str | None
    location: str

    def _execute(self, call: ApiCall, parse: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _parent(self, project: str | None = None, location: str | None = None) -> str:
        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        return f"projects/{project}/locations/{location or self.location}"

    def _expand(self, name_or_id: str, collection: str) -> str:
        """A bare id becomes ``projects/P/locations/L/{collection}/{id}`` with our defaults."""
        return name_or_id if "/" in name_or_id else f"{self._parent()}/{collection}/{name_or_id}"

    # --- customJobs

    def create_custom_job(self, job: CustomJob | Mapping[str, Any], project: str | None = None,
                          location: str | None = None) -> CustomJob:
        """Create a job. Raises :class:`SpecError` before sending a bad spec, and
        :class:`AmbiguousCreateError` when the outcome is unknown (reconcile by label)."""
        call = self.api.create_custom_job(self._parent(project, location), job)
        return self._execute(call, CustomJob.model_validate)

    def get_custom_job(self, name: str) -> CustomJob:
        return self._execute(self.api.get_custom_job(self._expand(name, "customJobs")), CustomJob.model_validate)

    def list_custom_jobs_page(self, filter: str | None = None, page_size: int | None = None,
                              page_token: str | None = None, read_mask: str | None = None,
                              project: str | None = None, location: str | None = None) -> ListCustomJobsResponse:
        call = self.api.list_custom_jobs(self._parent(project, location), filter, page_size, page_token, read_mask)
        return self._execute(call, ListCustomJobsResponse.model_validate)

    def cancel_custom_job(self, name: str) -> None:
        return self._execute(self.api.cancel_custom_job(self._expand(name, "customJobs")), _ignore)

    def delete_custom_job(self, name: str) -> Operation:
        return self._execute(self.api.delete_custom_job(self._expand(name, "customJobs")), Operation.model_validate)

    # --- persistentResources

    def create_persistent_resource(self, resource: PersistentResource | Mapping[str, Any], resource_id: str,
                                   project: str | None = None, location: str | None = None) -> Operation:
        call = self.api.create_persistent_resource(self._parent(project, location), resource, resource_id)
        return self._execute(call, Operation.model_validate)

    def get_persistent_resource(self, name_or_id: str) -> PersistentResource:
        call = self.api.get_persistent_resource(self._expand(name_or_id, "persistentResources"))
        return self._execute(call, PersistentResource.model_validate)

    def list_persistent_resources_page(self, page_size: int | None = None, page_token: str | None = None,
                                       project: str | None = None,
                                       location: str | None = None) -> ListPersistentResourcesResponse:
        call = self.api.list_persistent_resources(self._parent(project, location), page_size, page_token)
        return self._execute(call, ListPersistentResourcesResponse.model_validate)

    def delete_persistent_resource(self, name_or_id: str) -> Operation:
        call = self.api.delete_persistent_resource(self._expand(name_or_id, "persistentResources"))
        return self._execute(call, Operation.model_validate)

    # --- hyperparameterTuningJobs

    def create_hyperparameter_tuning_job(self, job: HyperparameterTuningJob | Mapping[str, Any],
                                         project: str | None = None,
                                         location: str | None = None) -> HyperparameterTuningJob:
        """Create a tuning job. Raises :class:`SpecError` before sending a bad spec, and
        :class:`AmbiguousCreateError` when the outcome is unknown (reconcile by label)."""
        call = self.api.create_hyperparameter_tuning_job(self._parent(project, location), job)
        return self._execute(call, HyperparameterTuningJob.model_validate)

    def get_hyperparameter_tuning_job(self, name: str) -> HyperparameterTuningJob:
        call = self.api.get_hyperparameter_tuning_job(self._expand(name, "hyperparameterTuningJobs"))
        return self._execute(call, HyperparameterTuningJob.model_validate)

    def list_hyperparameter_tuning_jobs_page(self, filter: str | None = None, page_size: int | None = None,
                                             page_token: str | None = None, read_mask: str | None = None,
                                             project: str | None = None,
                                             location: str | None = None) -> ListHyperparameterTuningJobsResponse:
        call = self.api.list_hyperparameter_tuning_jobs(self._parent(project, location), filter, page_size,
                                                        page_token, read_mask)
        return self._execute(call, ListHyperparameterTuningJobsResponse.model_validate)

    def cancel_hyperparameter_tuning_job(self, name: str) -> None:
        call = self.api.cancel_hyperparameter_tuning_job(self._expand(name, "hyperparameterTuningJobs"))
        return self._execute(call, _ignore)

    def delete_hyperparameter_tuning_job(self, name: str) -> Operation:
        call = self.api.delete_hyperparameter_tuning_job(self._expand(name, "hyperparameterTuningJobs"))
        return self._execute(call, Operation.model_validate)

    # --- trainingPipelines

    def create_training_pipeline(self, pipeline: TrainingPipeline | Mapping[str, Any], project: str | None = None,
                                 location: str | None = None) -> TrainingPipeline:
        """Create a pipeline. Raises :class:`SpecError` before sending a bad spec, and
        :class:`AmbiguousCreateError` when the outcome is unknown (reconcile by label)."""
        call = self.api.create_training_pipeline(self._parent(project, location), pipeline)
        return self._execute(call, TrainingPipeline.model_validate)

    def get_training_pipeline(self, name: str) -> TrainingPipeline:
        call = self.api.get_training_pipeline(self._expand(name, "trainingPipelines"))
        return self._execute(call, TrainingPipeline.model_validate)

    def list_training_pipelines_page(self, filter: str | None = None, page_size: int | None = None,
                                     page_token: str | None = None, read_mask: str | None = None,
                                     project: str | None = None,
                                     location: str | None = None) -> ListTrainingPipelinesResponse:
        call = self.api.list_training_pipelines(self._parent(project, location), filter, page_size, page_token,
                                                read_mask)
        return self._execute(call, ListTrainingPipelinesResponse.model_validate)

    def cancel_training_pipeline(self, name: str) -> None:
        return self._execute(self.api.cancel_training_pipeline(self._expand(name, "trainingPipelines")), _ignore)

    def delete_training_pipeline(self, name: str) -> Operation:
        call = self.api.delete_training_pipeline(self._expand(name, "trainingPipelines"))
        return self._execute(call, Operation.model_validate)

    # --- models

    def get_model(self, name: str) -> Model:
        """A model by name, ``name@VERSION`` or bare id (with this client's project/location)."""
        return self._execute(self.api.get_model(self._expand(name, "models")), Model.model_validate)

    def list_models_page(self, filter: str | None = None, page_size: int | None = None,
                         page_token: str | None = None, project: str | None = None,
                         location: str | None = None, read_mask: str | None = None) -> ListModelsResponse:
        call = self.api.list_models(self._parent(project, location), filter, page_size, page_token, read_mask)
        return self._execute(call, ListModelsResponse.model_validate)

    # --- Cloud Logging (logging v2 entries:list; shapes in vertex.cloud_logging)

    def list_log_entries_page(self, filter: str, page_size: int | None = None, page_token: str | None = None,
                              order_by: str = "timestamp asc", project: str | None = None) -> Any:
        """One page of ``entries:list`` in ``projects/{project}`` -> ``ListLogEntriesResponse``."""
        from airflow_gpu_sched.vertex import cloud_logging

        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        body = cloud_logging.list_request(project, filter, page_size or cloud_logging.MAX_PAGE_SIZE, page_token,
                                          order_by)
        call = ApiCall("entries.list", "POST", "entries:list", "global", body=body, service="logging")
        return self._execute(call, cloud_logging.ListLogEntriesResponse.model_validate)

    # --- Cloud Quotas

    def list_quota_infos_page(self, project: str | None = None, service: str = AIPLATFORM_SERVICE,
                              page_size: int | None = None, page_token: str | None = None) -> ListQuotaInfosResponse:
        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        call = self.api.list_quota_infos(project, service, page_size, page_token)
        return self._execute(call, ListQuotaInfosResponse.model_validate)

    # --- Cloud Billing catalog

    def list_skus_page(self, service: str, page_size: int | None = None, page_token: str | None = None,
                       currency_code: str | None = None) -> ListSkusResponse:
        return self._execute(self.api.list_skus(service, page_size, page_token, currency_code),
                             ListSkusResponse.model_validate)

    # --- Compute Engine reservations

    def get_reservation(self, name: str) -> Reservation:
        return self._execute(self.api.get_reservation(name), Reservation.model_validate)

    def list_reservations_page(self, zone: str, page_token: str | None = None, max_results: int | None = None,
                               project: str | None = None) -> ReservationList:
        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        call = self.api.list_reservations(project, zone, page_token, max_results)
        return self._execute(call, ReservationList.model_validate)

    def insert_reservation(self, zone: str, reservation: Mapping[str, Any], request_id: str | None = None,
                           project: str | None = None) -> ComputeOperation:
        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        call = self.api.insert_reservation(project, zone, reservation, request_id)
        return self._execute(call, ComputeOperation.model_validate)

    # --- operations

    def get_operation(self, name: str) -> Operation:
        return self._execute(self.api.get_operation(name), Operation.model_validate)


def _ignore(_: Any) -> None:
    return None


def parse_success_body(content: bytes, request: ApiRequestInfo) -> Any:
    """A 2xx body as JSON. A broken body is a protocol error: it goes through the classifier
    like a reset would (a create that got a 200 with garbage probably made the job)."""
    if not content.strip():
        return {}
    try:
        return json.loads(content)
    except ValueError:
        raise VertexTransportError(
            "protocol", request, f"2xx response is not JSON: {_text_of(content, 120)}") from None
