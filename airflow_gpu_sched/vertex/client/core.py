"""The calls both clients make, with no I/O: :class:`VertexApi` builds each REST method's
request (:mod:`.calls`) at its URL (:mod:`.endpoints`); :class:`ClientMethods` is the method list
both faces share. The sync face (:mod:`.sync`) and the async face (:mod:`.aio`) only send what
this builds and ask :mod:`.responses` what an answer means and whether to retry.

May import: vertex; never airflow.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping, TypeVar
from urllib.parse import quote, urlencode

from airflow_gpu_sched.vertex import resource_names
from airflow_gpu_sched.vertex.billing import ListSkusResponse
from airflow_gpu_sched.vertex.client.calls import ApiCall, Safety
from airflow_gpu_sched.vertex.client.endpoints import (
    api_root,
    compute_root,
    location_of,
    logging_root,
    normalize_endpoint,
    quotas_root,
    service_root,
)
from airflow_gpu_sched.vertex.client.errors import ApiRequestInfo
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
)
from airflow_gpu_sched.vertex.job_type_rules import validate_training_pipeline, validate_tuning_job
from airflow_gpu_sched.vertex.persistent_rules import check_persistent_resource
from airflow_gpu_sched.vertex.reservations import ComputeOperation, Reservation, ReservationList
from airflow_gpu_sched.vertex.rules import SpecError, validate_custom_job

log = logging.getLogger("airflow_gpu_sched.client")  # the name users' logging configs know

T = TypeVar("T")

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
        """Checked against :func:`job_type_rules.check_tuning_job` first; the server picks the id, so a
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
        """Checked against :func:`job_type_rules.check_training_pipeline` first; not safe to repeat."""
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


# --------------------------------------------------------------------------- the method list


class ClientMethods:
    """The client methods both faces share. Each body is ``self._execute(call, parse)``: the
    sync face returns the parsed value, the async face returns an awaitable of it, so
    ``client.get_custom_job(name)`` and ``await aclient.get_custom_job(name)`` both work.
    Paging iterators and ``wait_operation`` differ in kind and live in each face (one paging
    helper each, over these ``*_page`` methods). A ``*_page`` method takes its resource's
    required arguments, then keyword-only arguments in one order: ``filter``, the page size
    (``page_size``; compute's ``max_results``), ``page_token``, what else the call reads
    (``read_mask``, ``order_by``, ``currency_code``), ``project``, ``location``."""

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

    def list_custom_jobs_page(self, *, filter: str | None = None, page_size: int | None = None,
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

    def list_persistent_resources_page(self, *, page_size: int | None = None, page_token: str | None = None,
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

    def list_hyperparameter_tuning_jobs_page(self, *, filter: str | None = None, page_size: int | None = None,
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

    def list_training_pipelines_page(self, *, filter: str | None = None, page_size: int | None = None,
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

    def list_models_page(self, *, filter: str | None = None, page_size: int | None = None,
                         page_token: str | None = None, read_mask: str | None = None,
                         project: str | None = None, location: str | None = None) -> ListModelsResponse:
        call = self.api.list_models(self._parent(project, location), filter, page_size, page_token, read_mask)
        return self._execute(call, ListModelsResponse.model_validate)

    # --- Cloud Logging (logging v2 entries:list; shapes in vertex.cloud_logging)

    def list_log_entries_page(self, filter: str, *, page_size: int | None = None, page_token: str | None = None,
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

    def list_quota_infos_page(self, project: str | None = None, service: str = AIPLATFORM_SERVICE, *,
                              page_size: int | None = None, page_token: str | None = None) -> ListQuotaInfosResponse:
        project = project or self.project
        if not project:
            raise ValueError("no project: pass project= to the client or to the call")
        call = self.api.list_quota_infos(project, service, page_size, page_token)
        return self._execute(call, ListQuotaInfosResponse.model_validate)

    # --- Cloud Billing catalog

    def list_skus_page(self, service: str, *, page_size: int | None = None, page_token: str | None = None,
                       currency_code: str | None = None) -> ListSkusResponse:
        return self._execute(self.api.list_skus(service, page_size, page_token, currency_code),
                             ListSkusResponse.model_validate)

    # --- Compute Engine reservations

    def get_reservation(self, name: str) -> Reservation:
        return self._execute(self.api.get_reservation(name), Reservation.model_validate)

    def list_reservations_page(self, zone: str, *, max_results: int | None = None, page_token: str | None = None,
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
