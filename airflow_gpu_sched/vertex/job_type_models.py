"""Models of the other training surfaces: hyperparameter tuning jobs (StudySpec, Trial), training
pipelines, registered Models, and the Cloud Quotas API's QuotaInfo.

Same conventions as :mod:`airflow_gpu_sched.vertex.models` (camelCase on the wire, int64 as strings,
unknown fields ignored). Kept apart from it because the operators import ``models`` when a DAG
file is parsed, and these classes are needed only when a task runs (they added ~14 ms to every
parse); their enums (PipelineState, TrialState, GoalType, ...) stay in ``models``.

May import: vertex; never airflow.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from airflow_gpu_sched.vertex.enums import (
    GoalType,
    JobState,
    MeasurementSelectionType,
    PipelineState,
    ScaleType,
    SearchAlgorithm,
    TrialState,
)
from airflow_gpu_sched.vertex.models import CustomJobSpec, EnvVar, Status, VertexModel
from airflow_gpu_sched.vertex.wire_scalars import Duration, Int64, Timestamp


# --------------------------------------------------------------------------- hyperparameter tuning


class MetricSpec(VertexModel):
    """StudySpec.metrics[]: what a trial reports and which way is better."""

    metric_id: str | None = None
    goal: GoalType | None = None
    safety_config: dict[str, Any] | None = None


class DoubleValueSpec(VertexModel):
    min_value: float | None = None
    max_value: float | None = None
    default_value: float | None = None


class IntegerValueSpec(VertexModel):
    min_value: Int64 | None = None
    max_value: Int64 | None = None
    default_value: Int64 | None = None


class CategoricalValueSpec(VertexModel):
    values: list[str] | None = None
    default_value: str | None = None


class DiscreteValueSpec(VertexModel):
    values: list[float] | None = None
    default_value: float | None = None


class ParameterSpec(VertexModel):
    """StudySpec.parameters[]: exactly one of the four value specs."""

    parameter_id: str | None = None
    double_value_spec: DoubleValueSpec | None = None
    integer_value_spec: IntegerValueSpec | None = None
    categorical_value_spec: CategoricalValueSpec | None = None
    discrete_value_spec: DiscreteValueSpec | None = None
    scale_type: ScaleType | None = None
    conditional_parameter_specs: list[dict[str, Any]] | None = None

    @property
    def value_specs(self) -> list[str]:
        """Wire names of the value specs set (a valid spec has exactly one)."""
        return [wire for attr, wire in (("double_value_spec", "doubleValueSpec"),
                                        ("integer_value_spec", "integerValueSpec"),
                                        ("categorical_value_spec", "categoricalValueSpec"),
                                        ("discrete_value_spec", "discreteValueSpec"))
                if getattr(self, attr) is not None]


class StudySpec(VertexModel):
    metrics: list[MetricSpec] = Field(default_factory=list)
    parameters: list[ParameterSpec] = Field(default_factory=list)
    algorithm: SearchAlgorithm | None = None
    observation_noise: str | None = None
    measurement_selection_type: MeasurementSelectionType | None = None
    decay_curve_stopping_spec: dict[str, Any] | None = None
    median_automated_stopping_spec: dict[str, Any] | None = None
    convex_automated_stopping_spec: dict[str, Any] | None = None
    study_stopping_config: dict[str, Any] | None = None

    @property
    def goal(self) -> GoalType:
        """The first metric's goal (the one ``best_trial`` ranks by); MAXIMIZE when unset."""
        goal = self.metrics[0].goal if self.metrics else None
        return GoalType.MINIMIZE if goal is GoalType.MINIMIZE else GoalType.MAXIMIZE


class TrialParameter(VertexModel):
    parameter_id: str | None = None
    value: Any = None  # a number for DOUBLE/INTEGER/DISCRETE, a string for CATEGORICAL


class MeasurementMetric(VertexModel):
    metric_id: str | None = None
    value: float | None = None


class Measurement(VertexModel):
    step_count: Int64 | None = None
    elapsed_duration: Duration | None = None
    metrics: list[MeasurementMetric] = Field(default_factory=list)

    def value_of(self, metric_id: str) -> float | None:
        return next((m.value for m in self.metrics if m.metric_id == metric_id), None)


class Trial(VertexModel):
    name: str | None = None
    id: str | None = None
    state: TrialState | None = None
    parameters: list[TrialParameter] = Field(default_factory=list)
    final_measurement: Measurement | None = None
    measurements: list[Measurement] | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    client_id: str | None = None
    infeasible_reason: str | None = None
    custom_job: str | None = None  # resource name of the trial's CustomJob
    web_access_uris: dict[str, str] | None = None

    @property
    def parameter_values(self) -> dict[str, Any]:
        return {p.parameter_id or "": p.value for p in self.parameters}


class HyperparameterTuningJob(VertexModel):
    name: str | None = None
    display_name: str | None = None
    study_spec: StudySpec = Field(default_factory=StudySpec)
    max_trial_count: int | None = None
    parallel_trial_count: int | None = None
    max_failed_trial_count: int | None = None
    trial_job_spec: CustomJobSpec = Field(default_factory=CustomJobSpec)
    trials: list[Trial] | None = None
    state: JobState | None = None
    create_time: Timestamp | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    update_time: Timestamp | None = None
    error: Status | None = None
    labels: dict[str, str] | None = None
    encryption_spec: dict[str, Any] | None = None
    satisfies_pzs: bool | None = None
    satisfies_pzi: bool | None = None

    @property
    def job_id(self) -> str | None:
        return self.name.rsplit("/", 1)[-1] if self.name else None

    def is_terminal(self) -> bool:
        return self.state is not None and self.state.is_terminal()

    def best_trial(self) -> Trial | None:
        """The succeeded trial with the best final value of the study's first metric."""
        if not self.study_spec.metrics:
            return None
        metric_id = self.study_spec.metrics[0].metric_id or ""
        scored = [(t.final_measurement.value_of(metric_id), t) for t in self.trials or []
                  if t.state is TrialState.SUCCEEDED and t.final_measurement is not None]
        scored = [(v, t) for v, t in scored if v is not None]
        if not scored:
            return None
        pick = min if self.study_spec.goal is GoalType.MINIMIZE else max
        return pick(scored, key=lambda vt: vt[0])[1]


# --------------------------------------------------------------------------- training pipelines and models


class Port(VertexModel):
    container_port: int | None = None


class ModelContainerSpec(VertexModel):
    """Model.containerSpec: the serving container (not the training one)."""

    image_uri: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    ports: list[Port] | None = None
    predict_route: str | None = None
    health_route: str | None = None


class Model(VertexModel):
    name: str | None = None  # projects/P/locations/L/models/ID (no @version)
    display_name: str | None = None
    description: str | None = None
    version_id: str | None = None
    version_aliases: list[str] | None = None
    version_description: str | None = None
    version_create_time: Timestamp | None = None
    version_update_time: Timestamp | None = None
    container_spec: ModelContainerSpec | None = None
    artifact_uri: str | None = None
    labels: dict[str, str] | None = None
    create_time: Timestamp | None = None
    update_time: Timestamp | None = None
    training_pipeline: str | None = None
    metadata: Any = None
    metadata_schema_uri: str | None = None
    etag: str | None = None

    @property
    def model_id(self) -> str | None:
        return self.name.rsplit("/", 1)[-1].split("@", 1)[0] if self.name else None

    @property
    def versioned_name(self) -> str | None:
        """``projects/P/locations/L/models/ID@VERSION`` (the name of this exact version)."""
        if not self.name:
            return None
        base = self.name.split("@", 1)[0]
        return f"{base}@{self.version_id}" if self.version_id else base


class TrainingPipeline(VertexModel):
    name: str | None = None
    display_name: str | None = None
    training_task_definition: str | None = None
    training_task_inputs: dict[str, Any] | None = None  # a CustomJobSpec for the custom task
    training_task_metadata: dict[str, Any] | None = None  # output: {"backingCustomJob": name}
    model_to_upload: Model | None = None
    model_id: str | None = None
    parent_model: str | None = None
    input_data_config: dict[str, Any] | None = None
    state: PipelineState | None = None
    create_time: Timestamp | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = None
    update_time: Timestamp | None = None
    error: Status | None = None
    labels: dict[str, str] | None = None
    encryption_spec: dict[str, Any] | None = None

    @property
    def pipeline_id(self) -> str | None:
        return self.name.rsplit("/", 1)[-1] if self.name else None

    @property
    def job_state(self) -> JobState | None:
        """The state as a JobState (``PIPELINE_STATE_X`` -> ``JOB_STATE_X``)."""
        return None if self.state is None else self.state.as_job_state()

    def is_terminal(self) -> bool:
        return self.state is not None and self.state.is_terminal()

    @property
    def custom_job_spec(self) -> CustomJobSpec:
        """``trainingTaskInputs`` read as the CustomJobSpec the custom task takes."""
        return CustomJobSpec.model_validate(self.training_task_inputs or {})

    @property
    def backing_custom_job(self) -> str | None:
        return (self.training_task_metadata or {}).get("backingCustomJob")


class ListHyperparameterTuningJobsResponse(VertexModel):
    hyperparameter_tuning_jobs: list[HyperparameterTuningJob] = Field(default_factory=list)
    next_page_token: str | None = None


class ListTrainingPipelinesResponse(VertexModel):
    training_pipelines: list[TrainingPipeline] = Field(default_factory=list)
    next_page_token: str | None = None


class ListModelsResponse(VertexModel):
    models: list[Model] = Field(default_factory=list)
    next_page_token: str | None = None


# --------------------------------------------------------------------------- Cloud Quotas (cloudquotas.googleapis.com v1)


class RolloutInfo(VertexModel):
    ongoing_rollout: bool | None = None


class QuotaDetails(VertexModel):
    value: Int64 | None = None  # the limit in effect; -1 means unlimited
    rollout_info: RolloutInfo | None = None


class DimensionsInfo(VertexModel):
    dimensions: dict[str, str] = Field(default_factory=dict)  # {} = every region not listed
    details: QuotaDetails | None = None
    applicable_locations: list[str] | None = None


class QuotaInfo(VertexModel):
    """One quota of a service (Cloud Quotas API v1 ``QuotaInfo``)."""

    name: str | None = None
    quota_id: str | None = None
    metric: str | None = None  # e.g. aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus
    service: str | None = None
    is_precise: bool | None = None
    refresh_interval: str | None = None
    container_type: str | None = None
    dimensions: list[str] | None = None
    metric_display_name: str | None = None
    quota_display_name: str | None = None
    metric_unit: str | None = None
    quota_increase_eligibility: dict[str, Any] | None = None
    is_fixed: bool | None = None
    dimensions_infos: list[DimensionsInfo] = Field(default_factory=list)
    is_concurrent: bool | None = None
    service_request_quota_uri: str | None = None

    def limit_for(self, region: str) -> int | None:
        """The limit in ``region``: its own dimensionsInfo, else the default one (no region
        dimension), else None. -1 (unlimited) is returned as is."""
        default = None
        for info in self.dimensions_infos:
            where = info.dimensions.get("region")
            # proto3 JSON leaves a 0 limit out ("details": {}): absent is 0, not unknown
            value = (info.details.value or 0) if info.details else None
            if where == region:
                return value
            if where is None and default is None:
                default = value
        return default


class ListQuotaInfosResponse(VertexModel):
    quota_infos: list[QuotaInfo] = Field(default_factory=list)
    next_page_token: str | None = None


def quota_limit(quota_infos: list[QuotaInfo], metric: str, region: str) -> int | None:
    """The limit of ``metric`` in ``region`` from a list of QuotaInfo (``quotaInfos.list``).

    ``metric`` may be the full name (``aiplatform.googleapis.com/custom_model_training_...``)
    or the short one. A dimensionsInfo whose ``dimensions`` is empty is the default for every
    region without its own. None when no QuotaInfo has the metric; -1 (unlimited) is returned
    as is: callers must not read it as a limit (:func:`airflow_gpu_sched.orchestration.quota.shortfalls` does not).
    """
    short = metric.rsplit("/", 1)[-1]
    for info in quota_infos:
        if (info.metric or "").rsplit("/", 1)[-1] == short:
            limit = info.limit_for(region)
            if limit is not None:
                return limit
    return None
