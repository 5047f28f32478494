"""``readMask`` on the list methods: which paths a mask may name, and the page projected to them.

Google documents ``readMask`` ("Mask specifying which fields to read", format google-fieldmask)
on customJobs, hyperparameterTuningJobs, trainingPipelines and models ``list``. A FieldMask in
a query parameter uses its JSON encoding: paths separated by commas, each field name in
lowerCamelCase (field_mask.proto; protobuf's JSON parser refuses a path containing ``_``); a
path may go into a message field, and ends at a repeated field, a map or a ``Struct`` value.

:data:`SCHEMAS` is vendored from the aiplatform v1 discovery document (schema -> its fields,
``field:Schema`` for a message field a path may enter; the ``GoogleCloudAiplatformV1`` prefix
dropped); ``tests/test_emulator_methods.py`` regenerates it from the document and compares.
The emulator's choices (*assumed*: Google does not say): an unknown path is a 400
INVALID_ARGUMENT naming it; a listed resource carries exactly the masked paths it has (no
``name`` unless asked for); an empty mask reads everything.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

ROOTS = {"customJobs": "CustomJob", "hyperparameterTuningJobs": "HyperparameterTuningJob",
         "trainingPipelines": "TrainingPipeline", "models": "Model"}

# aiplatform v1 discovery document, revision 20261106
SCHEMAS: dict[str, str] = {
    "CustomJob": (
        "createTime displayName encryptionSpec:EncryptionSpec endTime error:GoogleRpcStatus "
        "jobSpec:CustomJobSpec labels name satisfiesPzi satisfiesPzs startTime state updateTime "
        "webAccessUris"
    ),
    "EncryptionSpec": "kmsKeyName",
    "GoogleRpcStatus": "code details message",
    "CustomJobSpec": (
        "baseOutputDirectory:GcsDestination enableDashboardAccess enableWebAccess experiment "
        "experimentRun models network persistentResourceId protectedArtifactLocationId "
        "pscInterfaceConfig:PscInterfaceConfig reservedIpRanges scheduling:Scheduling serviceAccount "
        "tensorboard workerPoolSpecs"
    ),
    "GcsDestination": "outputUriPrefix",
    "PscInterfaceConfig": "dnsPeeringConfigs networkAttachment",
    "Scheduling": "disableRetries maxWaitDuration restartJobOnWorkerRestart strategy timeout",
    "HyperparameterTuningJob": (
        "createTime displayName encryptionSpec:EncryptionSpec endTime error:GoogleRpcStatus labels "
        "maxFailedTrialCount maxTrialCount name parallelTrialCount satisfiesPzi satisfiesPzs startTime "
        "state studySpec:StudySpec trialJobSpec:CustomJobSpec trials updateTime"
    ),
    "StudySpec": (
        "algorithm convexAutomatedStoppingSpec:StudySpecConvexAutomatedStoppingSpec "
        "decayCurveStoppingSpec:StudySpecDecayCurveAutomatedStoppingSpec measurementSelectionType "
        "medianAutomatedStoppingSpec:StudySpecMedianAutomatedStoppingSpec metrics observationNoise "
        "parameters studyStoppingConfig:StudySpecStudyStoppingConfig"
    ),
    "StudySpecConvexAutomatedStoppingSpec": (
        "learningRateParameterName maxStepCount minMeasurementCount minStepCount updateAllStoppedTrials "
        "useElapsedDuration"
    ),
    "StudySpecDecayCurveAutomatedStoppingSpec": "useElapsedDuration",
    "StudySpecMedianAutomatedStoppingSpec": "useElapsedDuration",
    "StudySpecStudyStoppingConfig": (
        "maxDurationNoProgress maxNumTrials maxNumTrialsNoProgress "
        "maximumRuntimeConstraint:StudyTimeConstraint minNumTrials "
        "minimumRuntimeConstraint:StudyTimeConstraint shouldStopAsap"
    ),
    "StudyTimeConstraint": "endTime maxDuration",
    "TrainingPipeline": (
        "createTime displayName encryptionSpec:EncryptionSpec endTime error:GoogleRpcStatus "
        "inputDataConfig:InputDataConfig labels modelId modelToUpload:Model name parentModel startTime "
        "state trainingTaskDefinition trainingTaskInputs trainingTaskMetadata updateTime"
    ),
    "InputDataConfig": (
        "annotationSchemaUri annotationsFilter bigqueryDestination:BigQueryDestination datasetId "
        "filterSplit:FilterSplit fractionSplit:FractionSplit gcsDestination:GcsDestination "
        "persistMlUseAssignment predefinedSplit:PredefinedSplit savedQueryId "
        "stratifiedSplit:StratifiedSplit timestampSplit:TimestampSplit"
    ),
    "BigQueryDestination": "outputUri",
    "FilterSplit": "testFilter trainingFilter validationFilter",
    "FractionSplit": "testFraction trainingFraction validationFraction",
    "PredefinedSplit": "key",
    "StratifiedSplit": "key testFraction trainingFraction validationFraction",
    "TimestampSplit": "key testFraction trainingFraction validationFraction",
    "Model": (
        "artifactUri baseModelSource:ModelBaseModelSource checkpoints containerSpec:ModelContainerSpec "
        "createTime dataStats:ModelDataStats defaultCheckpointId deployedModels description displayName "
        "encryptionSpec:EncryptionSpec etag explanationSpec:ExplanationSpec labels metadata "
        "metadataArtifact metadataSchemaUri modelSourceInfo:ModelSourceInfo name "
        "originalModelInfo:ModelOriginalModelInfo pipelineJob predictSchemata:PredictSchemata "
        "satisfiesPzi satisfiesPzs supportedDeploymentResourcesTypes supportedExportFormats "
        "supportedInputStorageFormats supportedOutputStorageFormats trainingPipeline updateTime "
        "versionAliases versionCreateTime versionDescription versionId versionUpdateTime"
    ),
    "ModelBaseModelSource": "genieSource:GenieSource modelGardenSource:ModelGardenSource",
    "GenieSource": "baseModelUri",
    "ModelGardenSource": "publicModelName skipHfModelCache versionId",
    "ModelContainerSpec": (
        "args command deploymentTimeout env grpcPorts healthProbe:Probe healthRoute imageUri "
        "invokeRoutePrefix livenessProbe:Probe ports predictRoute sharedMemorySizeMb startupProbe:Probe"
    ),
    "Probe": (
        "exec:ProbeExecAction failureThreshold grpc:ProbeGrpcAction httpGet:ProbeHttpGetAction "
        "initialDelaySeconds periodSeconds successThreshold tcpSocket:ProbeTcpSocketAction timeoutSeconds"
    ),
    "ProbeExecAction": "command",
    "ProbeGrpcAction": "port service",
    "ProbeHttpGetAction": "host httpHeaders path port scheme",
    "ProbeTcpSocketAction": "host port",
    "ModelDataStats": (
        "testAnnotationsCount testDataItemsCount trainingAnnotationsCount trainingDataItemsCount "
        "validationAnnotationsCount validationDataItemsCount"
    ),
    "ExplanationSpec": "metadata:ExplanationMetadata parameters:ExplanationParameters",
    "ExplanationMetadata": "featureAttributionsSchemaUri inputs latentSpaceSource outputs",
    "ExplanationParameters": (
        "examples:Examples integratedGradientsAttribution:IntegratedGradientsAttribution outputIndices "
        "sampledShapleyAttribution:SampledShapleyAttribution topK xraiAttribution:XraiAttribution"
    ),
    "Examples": (
        "exampleGcsSource:ExamplesExampleGcsSource nearestNeighborSearchConfig neighborCount "
        "presets:Presets"
    ),
    "ExamplesExampleGcsSource": "dataFormat gcsSource:GcsSource",
    "GcsSource": "uris",
    "Presets": "modality query",
    "IntegratedGradientsAttribution": "blurBaselineConfig:BlurBaselineConfig smoothGradConfig:SmoothGradConfig stepCount",
    "BlurBaselineConfig": "maxBlurSigma",
    "SmoothGradConfig": "featureNoiseSigma:FeatureNoiseSigma noiseSigma noisySampleCount",
    "FeatureNoiseSigma": "noiseSigma",
    "SampledShapleyAttribution": "pathCount",
    "XraiAttribution": "blurBaselineConfig:BlurBaselineConfig smoothGradConfig:SmoothGradConfig stepCount",
    "ModelSourceInfo": "copy sourceType",
    "ModelOriginalModelInfo": "model",
    "PredictSchemata": "instanceSchemaUri parametersSchemaUri predictionSchemaUri",
}


class FieldMaskError(ValueError):
    """A readMask path the listed resource does not have; the message names it."""


@lru_cache(maxsize=None)
def _fields(schema: str) -> dict[str, str | None]:
    fields: dict[str, str | None] = {}
    for item in SCHEMAS[schema].split():
        name, _, child = item.partition(":")
        fields[name] = child or None
    return fields


@lru_cache(maxsize=256)
def parse_read_mask(collection: str, text: str) -> tuple[tuple[str, ...], ...] | None:
    """The mask's paths, each split into field names; None when there is no mask."""
    paths = tuple(p.strip() for p in (text or "").split(",") if p.strip())
    if not paths:
        return None
    root = ROOTS[collection]
    for path in paths:
        if "_" in path:
            raise FieldMaskError(f'readMask path "{path}" must be lowerCamelCase (FieldMask JSON encoding), '
                                 f"e.g. createTime")
        schema: str | None = root
        for segment in path.split("."):
            if schema is None or segment not in _fields(schema):
                raise FieldMaskError(f'readMask path "{path}" is not a field of {root}'
                                     + ("" if schema is None else f" (no field \"{segment}\" in {schema})"))
            schema = _fields(schema)[segment]
    return tuple(tuple(p.split(".")) for p in paths)


def project(resource: dict[str, Any], paths: tuple[tuple[str, ...], ...] | None) -> dict[str, Any]:
    """``resource`` with only the masked paths it has."""
    if paths is None:
        return resource
    out: dict[str, Any] = {}
    for path in paths:
        source, target = resource, out
        for segment in path[:-1]:
            source = source.get(segment) if isinstance(source, dict) else None
            if not isinstance(source, dict):
                break
            target = target.setdefault(segment, {})
        else:
            if isinstance(source, dict) and path[-1] in source:
                target[path[-1]] = source[path[-1]]
    return out
