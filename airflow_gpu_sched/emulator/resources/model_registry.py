"""Models of the Model Registry: a training pipeline that succeeds registers its model here
(``models/{modelId or a numeric id}`` version 1, or the next version of ``parentModel``); the
newest version holds the ``default`` alias.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.resources.listing import list_page
from airflow_gpu_sched.emulator.resources.store import Store
from airflow_gpu_sched.vertex.job_type_models import Model, TrainingPipeline
from airflow_gpu_sched.vertex.models import Status


@dataclass
class ModelRecord:
    name: str  # projects/P/locations/L/models/ID
    project: str
    location: str
    seq: int
    versions: list[Model] = field(default_factory=list)

    def default(self) -> Model:
        return next((v for v in self.versions if "default" in (v.version_aliases or [])), self.versions[-1])

    def wire(self) -> dict:
        return self.default().to_api()

    def filter_record(self) -> dict:
        model = self.default()
        # base_model_name: the emulator registers no model from a base model (assumed: always "")
        return {"model": self.name.rsplit("/", 1)[-1], "display_name": model.display_name,
                "labels": model.labels or {}, "base_model_name": ""}


class RegistrationFailed(Exception):
    def __init__(self, status: Status):
        self.status = status


class Models:
    def __init__(self, store: Store):
        self.store = store
        self.records: dict[str, ModelRecord] = {}

    def register(self, pipeline: TrainingPipeline, project: str, location: str, when: datetime) -> Model:
        """The pipeline's ``modelToUpload`` as a new model or a new version of its parent model."""
        upload = pipeline.model_to_upload or Model()
        if pipeline.parent_model:
            base = pipeline.parent_model
            entry = self.records.get(base)
            if entry is None:
                raise RegistrationFailed(Status(code=5, message=f"Parent model {base} does not exist."))
        else:
            base = f"projects/{project}/locations/{location}/models/{pipeline.model_id or self.store.new_id()}"
            if base in self.records:
                raise RegistrationFailed(Status(code=6, message=f"Model {base} already exists."))
            entry = ModelRecord(base, project, location, self.store.next_seq())
        aliases = ["default", *[a for a in upload.version_aliases or [] if a != "default"]]
        for older in entry.versions:
            older.version_aliases = [a for a in older.version_aliases or [] if a not in aliases] or None
        artifact = upload.artifact_uri
        output = pipeline.custom_job_spec.base_output_directory
        if artifact is None and output is not None and output.output_uri_prefix:
            artifact = output.output_uri_prefix.rstrip("/") + "/model"
        model = upload.model_copy(deep=True, update={
            "name": base, "version_id": str(len(entry.versions) + 1), "version_aliases": aliases,
            "artifact_uri": artifact, "create_time": entry.versions[0].create_time if entry.versions else when,
            "update_time": when, "version_create_time": when, "version_update_time": when,
            "training_pipeline": pipeline.name,
        })
        entry.versions.append(model)
        self.records[base] = entry
        self.store.bump("modelVersionsRegistered")
        return model.model_copy(deep=True)

    def get(self, name: str) -> dict:
        base, _, version = name.partition("@")
        entry = self.records.get(base)
        if entry is not None:
            if not version:
                return entry.wire()
            for model in entry.versions:
                if model.version_id == version or version in (model.version_aliases or []):
                    return model.to_api()
        raise ApiError("NOT_FOUND", f'The Model "{name}" does not exist.')

    def list(self, project: str, location: str, filter_text: str = "", page_size: int | None = None,
             page_token: str = "", read_mask: str = "", order_by: str = "") -> dict:
        return list_page(self.records.values(), "models", project, location, self.store.scenario.variants.list_pages,
                         filter_text, page_size, page_token, read_mask=read_mask, order_by=order_by)
