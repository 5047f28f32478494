"""The rules of the other job types: hyperparameter tuning jobs and custom-task training
pipelines, and the same rules for the operators' arguments that build them.

Their trial or task specs are custom job specs, checked by :mod:`rules` with paths from this
resource's root (``trialJobSpec...``, ``trainingTaskInputs...``).

May import: vertex; never airflow.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import ValidationError

from airflow_gpu_sched.vertex.enums import GoalType, SearchAlgorithm
from airflow_gpu_sched.vertex.models import CUSTOM_TASK_DEFINITION, CustomJobSpec
from airflow_gpu_sched.vertex.rules import (
    SpecError,
    Violation,
    check_display_name,
    check_job_spec,
    check_labels,
    parse_violations,
)

if TYPE_CHECKING:  # imported where used: the operators import this module at DAG-parse time
    from airflow_gpu_sched.vertex.job_type_models import (
        HyperparameterTuningJob,
        ParameterSpec,
        StudySpec,
        TrainingPipeline,
    )

MODEL_ID = re.compile(r"^[a-z_][a-z0-9_-]{0,62}$")
MODEL_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/models/[^/@]+$")


def check_tuning_counts(max_trial_count: int | None, parallel_trial_count: int | None,
                        max_failed_trial_count: int | None = None) -> list[Violation]:
    """``maxTrialCount`` >= 1; 1 <= ``parallelTrialCount`` <= ``maxTrialCount``;
    ``maxFailedTrialCount`` >= 0 (0: the service decides, see docs/emulator.md)."""
    found = []
    if max_trial_count is None or max_trial_count < 1:
        found.append(Violation("maxTrialCount", f"is required and must be at least 1 (got {max_trial_count})"))
    if parallel_trial_count is None or parallel_trial_count < 1:
        found.append(Violation("parallelTrialCount",
                               f"is required and must be at least 1 (got {parallel_trial_count})"))
    elif max_trial_count is not None and max_trial_count >= 1 and parallel_trial_count > max_trial_count:
        found.append(Violation("parallelTrialCount",
                               f"must not exceed maxTrialCount ({parallel_trial_count} > {max_trial_count})"))
    if max_failed_trial_count is not None and max_failed_trial_count < 0:
        found.append(Violation("maxFailedTrialCount", f"must be 0 or more (got {max_failed_trial_count})"))
    return found


def check_study_spec(study: StudySpec, path: str = "studySpec") -> list[Violation]:
    """At least one metric (id, goal MAXIMIZE or MINIMIZE) and one parameter (id, exactly one
    value spec with a valid range or list); ids unique; a known algorithm."""
    found = _check_metrics(study, path) + _check_parameters(study, path)
    if study.algorithm is not None and not study.algorithm.is_known:
        found.append(Violation(f"{path}.algorithm",
                               f"unknown algorithm {study.algorithm.value!r}: use GRID_SEARCH or RANDOM_SEARCH"))
    if study.algorithm is SearchAlgorithm.GRID_SEARCH:
        for index, parameter in enumerate(study.parameters):
            if parameter.double_value_spec is not None:
                found.append(Violation(f"{path}.parameters[{index}].doubleValueSpec",
                                       "GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL parameters"))
    return found


def _check_id(value: str | None, seen: set[str], path: str) -> list[Violation]:
    """A metric's or parameter's id: present, no whitespace, not used before (``seen`` grows)."""
    found = []
    if not value or any(c.isspace() for c in value):
        found.append(Violation(path, "is required and must not contain whitespace"))
    elif value in seen:
        found.append(Violation(path, f"{value!r} is used twice"))
    seen.add(value or "")
    return found


def _check_metrics(study: StudySpec, path: str) -> list[Violation]:
    found: list[Violation] = []
    if not study.metrics:
        found.append(Violation(f"{path}.metrics", "at least one metric is required (metricId and goal)"))
    seen: set[str] = set()
    for index, metric in enumerate(study.metrics):
        where = f"{path}.metrics[{index}]"
        found += _check_id(metric.metric_id, seen, f"{where}.metricId")
        if metric.goal not in (GoalType.MAXIMIZE, GoalType.MINIMIZE):
            got = metric.goal.value if metric.goal else "nothing"
            found.append(Violation(f"{where}.goal", f"must be MAXIMIZE or MINIMIZE (got {got})"))
    return found


def _check_parameters(study: StudySpec, path: str) -> list[Violation]:
    found: list[Violation] = []
    if not study.parameters:
        found.append(Violation(f"{path}.parameters", "at least one parameter to tune is required"))
    seen: set[str] = set()
    for index, parameter in enumerate(study.parameters):
        where = f"{path}.parameters[{index}]"
        found += _check_id(parameter.parameter_id, seen, f"{where}.parameterId")
        found += _check_parameter(parameter, where)
    return found


def _check_parameter(parameter: ParameterSpec, where: str) -> list[Violation]:
    specs = parameter.value_specs
    if len(specs) != 1:
        return [Violation(where, "set exactly one of doubleValueSpec, integerValueSpec, categoricalValueSpec "
                                 f"or discreteValueSpec (got {', '.join(specs) or 'none'})")]
    spec = specs[0]
    if spec in ("doubleValueSpec", "integerValueSpec"):
        value = parameter.double_value_spec or parameter.integer_value_spec
        if value.min_value is None or value.max_value is None:  # type: ignore[union-attr]
            return [Violation(f"{where}.{spec}", "minValue and maxValue are required")]
        if value.min_value > value.max_value:  # type: ignore[union-attr, operator]
            return [Violation(f"{where}.{spec}.minValue",
                              f"must not exceed maxValue ({value.min_value} > {value.max_value})")]  # type: ignore[union-attr]
        if parameter.scale_type is not None and parameter.scale_type.value.endswith("LOG_SCALE") \
                and value.min_value <= 0:  # type: ignore[union-attr, operator]
            return [Violation(f"{where}.scaleType", "a log scale needs minValue > 0")]
    else:
        values = (parameter.categorical_value_spec or parameter.discrete_value_spec).values  # type: ignore[union-attr]
        if not values:
            return [Violation(f"{where}.{spec}.values", "at least one value is required")]
        if spec == "discreteValueSpec" and list(values) != sorted(set(values)):
            return [Violation(f"{where}.{spec}.values", "must be distinct and in increasing order")]
    return []


def check_tuning_job(job: HyperparameterTuningJob) -> list[Violation]:
    """Every rule a HyperparameterTuningJob breaks: display name, labels, trial counts, the
    study spec and the trial job spec (paths from the tuning job root: ``trialJobSpec...``)."""
    found = check_display_name(job.display_name)
    found += check_labels(job.labels or {}, "labels")
    found += check_tuning_counts(job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count)
    found += check_study_spec(job.study_spec, "studySpec")
    found += check_job_spec(job.trial_job_spec, "trialJobSpec")
    return found


def validate_tuning_job(job: HyperparameterTuningJob) -> HyperparameterTuningJob:
    found = check_tuning_job(job)
    if found:
        raise SpecError(found, "hyperparameter tuning job")
    return job


def check_training_pipeline(pipeline: TrainingPipeline) -> list[Violation]:
    """Rules for a custom-task TrainingPipeline: the custom task definition, task inputs that
    are a valid CustomJobSpec (paths ``trainingTaskInputs...``), a model to upload with a display
    name and a serving image, a well-formed ``parentModel``/``modelId``."""
    found = check_display_name(pipeline.display_name)
    found += check_labels(pipeline.labels or {}, "labels")
    if pipeline.training_task_definition != CUSTOM_TASK_DEFINITION:
        found.append(Violation("trainingTaskDefinition",
                               f"only the custom task {CUSTOM_TASK_DEFINITION} is supported "
                               f"(got {pipeline.training_task_definition!r})"))
    if not pipeline.training_task_inputs:
        found.append(Violation("trainingTaskInputs", "is required: a CustomJobSpec (workerPoolSpecs, scheduling, ...)"))
    else:
        try:
            spec = CustomJobSpec.model_validate(pipeline.training_task_inputs)
        except ValidationError as exc:
            found += [Violation(f"trainingTaskInputs.{v.path}", v.rule) for v in parse_violations(exc)]
        else:
            found += check_job_spec(spec, "trainingTaskInputs")
    model = pipeline.model_to_upload
    if model is None:
        found.append(Violation("modelToUpload", "is required: the model's displayName and serving containerSpec"))
    else:
        if not model.display_name:
            found.append(Violation("modelToUpload.displayName", "is required: the registered model's name"))
        else:
            found += check_display_name(model.display_name, "modelToUpload.displayName")
        if model.container_spec is None or not model.container_spec.image_uri:
            found.append(Violation("modelToUpload.containerSpec.imageUri",
                                   "is required: the serving container image of the model"))
        found += check_labels(model.labels or {}, "modelToUpload.labels")
    if pipeline.parent_model is not None and not MODEL_NAME.fullmatch(pipeline.parent_model):
        found.append(Violation("parentModel", f"must be a model resource name like "
                                              f"'projects/P/locations/L/models/ID' (got {pipeline.parent_model!r})"))
    if pipeline.model_id is not None and not MODEL_ID.fullmatch(pipeline.model_id):
        found.append(Violation("modelId", "up to 63 characters of [a-z0-9_-], not starting with a digit or '-' "
                                          f"(got {pipeline.model_id!r})"))
    return found


def validate_training_pipeline(pipeline: TrainingPipeline) -> TrainingPipeline:
    found = check_training_pipeline(pipeline)
    if found:
        raise SpecError(found, "training pipeline")
    return pipeline


# --------------------------------------------------------------------------- operator arguments (same rules)

_COUNT_ARGS = {"maxTrialCount": "max_trial_count", "parallelTrialCount": "parallel_trial_count",
               "maxFailedTrialCount": "max_failed_trial_count"}


def _with_argument_names(rule: str) -> str:
    for wire, argument in _COUNT_ARGS.items():
        rule = rule.replace(wire, argument)
    return rule


def check_tuning_options(study_spec: StudySpec | dict | None, max_trial_count: int | None,
                         parallel_trial_count: int | None,
                         max_failed_trial_count: int | None = None) -> list[Violation]:
    """The tuning rules of :func:`check_tuning_job`, for operator arguments: paths name the
    argument (``study_spec.metrics[0].goal``, ``parallel_trial_count``). ``parallel_trial_count``
    None means 1."""
    found = [Violation(_COUNT_ARGS.get(v.path, v.path), _with_argument_names(v.rule))
             for v in check_tuning_counts(max_trial_count, 1 if parallel_trial_count is None else parallel_trial_count,
                                          max_failed_trial_count)]
    if study_spec is None:
        return found + [Violation("study_spec", "is required: metrics (metricId, goal) and parameters to tune")]
    from airflow_gpu_sched.vertex.job_type_models import StudySpec

    if isinstance(study_spec, StudySpec):
        study = study_spec
    else:
        try:
            study = StudySpec.model_validate(study_spec)
        except ValidationError as exc:
            return found + [Violation(f"study_spec.{v.path}", v.rule) for v in parse_violations(exc)]
    return found + [Violation("study_spec" + v.path.removeprefix("studySpec"), v.rule)
                    for v in check_study_spec(study, "studySpec")]


def check_pipeline_options(model_display_name: str | None, model_serving_image_uri: str | None,
                           parent_model: str | None = None) -> list[Violation]:
    """The pipeline rules of :func:`check_training_pipeline` for operator arguments."""
    found = []
    if not model_display_name:
        found.append(Violation("model_display_name", "is required: the registered model's name"))
    else:
        found += [Violation("model_display_name", v.rule) for v in check_display_name(model_display_name)]
    if not model_serving_image_uri:
        found.append(Violation("model_serving_image_uri", "is required: the serving container image of the model"))
    if parent_model is not None and not MODEL_NAME.fullmatch(parent_model):
        found.append(Violation("parent_model", f"must be a model resource name like "
                                               f"'projects/P/locations/L/models/ID' (got {parent_model!r})"))
    return found
