"""The closed sets of the Vertex AI v1 surface, each written once: strategies, accelerators,
job, pipeline, trial and persistent resource states (and which states are terminal), and the
study's goals, algorithms and scales.

Enums are read from their names or their numbers (Google's own REST clients send numbers) and
written as names; a name this module does not know still parses (as an "open" member) so that
a new accelerator or state from the service never breaks a poll.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from enum import Enum


class OpenEnum(str, Enum):
    """A string enum read from its name or its proto number, that tolerates unknown names.

    Subclasses set ``_numbers_`` (proto number -> name) through ``_numbering``. An unknown
    name becomes a pseudo-member whose value is the name, so parsing never fails on a value
    the service added after this code was written; :mod:`rules` rejects it where it matters.
    """

    @classmethod
    def _missing_(cls, value: object) -> OpenEnum | None:
        if isinstance(value, int) and not isinstance(value, bool):
            name = _ENUM_NUMBERS.get(cls.__name__, {}).get(value)
            return cls[name] if name else None
        if isinstance(value, str) and value:
            if value in cls.__members__:
                return cls[value]
            pseudo = str.__new__(cls, value)
            pseudo._name_ = value
            pseudo._value_ = value
            return pseudo
        return None

    @property
    def is_known(self) -> bool:
        return self.name in type(self).__members__

    def __str__(self) -> str:
        return self.value


class Strategy(OpenEnum):
    STRATEGY_UNSPECIFIED = "STRATEGY_UNSPECIFIED"
    ON_DEMAND = "ON_DEMAND"
    LOW_COST = "LOW_COST"
    STANDARD = "STANDARD"
    SPOT = "SPOT"
    FLEX_START = "FLEX_START"

    @property
    def effective(self) -> Strategy:
        """What the service runs: unspecified and the deprecated on-demand mean STANDARD."""
        if self in (Strategy.STRATEGY_UNSPECIFIED, Strategy.ON_DEMAND, Strategy.LOW_COST):
            return Strategy.STANDARD
        return self


class AcceleratorType(OpenEnum):
    ACCELERATOR_TYPE_UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"
    NVIDIA_TESLA_K80 = "NVIDIA_TESLA_K80"
    NVIDIA_TESLA_P100 = "NVIDIA_TESLA_P100"
    NVIDIA_TESLA_V100 = "NVIDIA_TESLA_V100"
    NVIDIA_TESLA_P4 = "NVIDIA_TESLA_P4"
    NVIDIA_TESLA_T4 = "NVIDIA_TESLA_T4"
    NVIDIA_TESLA_A100 = "NVIDIA_TESLA_A100"
    NVIDIA_A100_80GB = "NVIDIA_A100_80GB"
    NVIDIA_L4 = "NVIDIA_L4"
    NVIDIA_H100_80GB = "NVIDIA_H100_80GB"
    NVIDIA_H100_MEGA_80GB = "NVIDIA_H100_MEGA_80GB"
    NVIDIA_H200_141GB = "NVIDIA_H200_141GB"
    NVIDIA_B200 = "NVIDIA_B200"
    NVIDIA_GB200 = "NVIDIA_GB200"
    NVIDIA_RTX_PRO_6000 = "NVIDIA_RTX_PRO_6000"
    TPU_V2 = "TPU_V2"
    TPU_V3 = "TPU_V3"
    TPU_V4_POD = "TPU_V4_POD"
    TPU_V5_LITEPOD = "TPU_V5_LITEPOD"

    @property
    def is_tpu(self) -> bool:
        return self.value.startswith("TPU_")


class JobState(OpenEnum):
    JOB_STATE_UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    JOB_STATE_QUEUED = "JOB_STATE_QUEUED"
    JOB_STATE_PENDING = "JOB_STATE_PENDING"
    JOB_STATE_RUNNING = "JOB_STATE_RUNNING"
    JOB_STATE_SUCCEEDED = "JOB_STATE_SUCCEEDED"
    JOB_STATE_FAILED = "JOB_STATE_FAILED"
    JOB_STATE_CANCELLING = "JOB_STATE_CANCELLING"
    JOB_STATE_CANCELLED = "JOB_STATE_CANCELLED"
    JOB_STATE_PAUSED = "JOB_STATE_PAUSED"
    JOB_STATE_EXPIRED = "JOB_STATE_EXPIRED"
    JOB_STATE_UPDATING = "JOB_STATE_UPDATING"
    JOB_STATE_PARTIALLY_SUCCEEDED = "JOB_STATE_PARTIALLY_SUCCEEDED"

    def is_terminal(self) -> bool:
        """True once the job can change no more (PAUSED is not terminal, nor a success)."""
        return self in TERMINAL_JOB_STATES


TERMINAL_JOB_STATES = frozenset(
    {
        JobState.JOB_STATE_SUCCEEDED,
        JobState.JOB_STATE_FAILED,
        JobState.JOB_STATE_CANCELLED,
        JobState.JOB_STATE_EXPIRED,
        JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
    }
)
# the names, in the proto's order (a list filter ORs them: the order keeps the filter text stable)
TERMINAL_JOB_STATE_NAMES = tuple(s.value for s in JobState if s in TERMINAL_JOB_STATES)


class PipelineState(OpenEnum):
    """A TrainingPipeline's state. Same life cycle as :class:`JobState` under other names:
    :meth:`as_job_state` maps ``PIPELINE_STATE_X`` to ``JOB_STATE_X`` so consumers can treat
    custom jobs, tuning jobs and pipelines alike."""

    PIPELINE_STATE_UNSPECIFIED = "PIPELINE_STATE_UNSPECIFIED"
    PIPELINE_STATE_QUEUED = "PIPELINE_STATE_QUEUED"
    PIPELINE_STATE_PENDING = "PIPELINE_STATE_PENDING"
    PIPELINE_STATE_RUNNING = "PIPELINE_STATE_RUNNING"
    PIPELINE_STATE_SUCCEEDED = "PIPELINE_STATE_SUCCEEDED"
    PIPELINE_STATE_FAILED = "PIPELINE_STATE_FAILED"
    PIPELINE_STATE_CANCELLING = "PIPELINE_STATE_CANCELLING"
    PIPELINE_STATE_CANCELLED = "PIPELINE_STATE_CANCELLED"
    PIPELINE_STATE_PAUSED = "PIPELINE_STATE_PAUSED"

    def is_terminal(self) -> bool:
        """True once the pipeline can change no more (PAUSED is not terminal, nor a success)."""
        return self in TERMINAL_PIPELINE_STATES

    def as_job_state(self) -> JobState:
        """``PIPELINE_STATE_X`` -> ``JOB_STATE_X`` (an unknown name maps to an open JobState)."""
        return pipeline_to_job_state(self)


TERMINAL_PIPELINE_STATES = frozenset(
    {
        PipelineState.PIPELINE_STATE_SUCCEEDED,
        PipelineState.PIPELINE_STATE_FAILED,
        PipelineState.PIPELINE_STATE_CANCELLED,
    }
)
TERMINAL_PIPELINE_STATE_NAMES = tuple(s.value for s in PipelineState if s in TERMINAL_PIPELINE_STATES)


def pipeline_to_job_state(state: PipelineState | str) -> JobState:
    """``PIPELINE_STATE_RUNNING`` -> ``JOB_STATE_RUNNING``; a JobState is returned unchanged."""
    if isinstance(state, JobState):
        return state
    return JobState("JOB_STATE_" + str(PipelineState(state).value).removeprefix("PIPELINE_STATE_"))


def as_job_state(state: JobState | PipelineState | str) -> JobState:
    """Any resource's state as a :class:`JobState` (custom jobs, tuning jobs, pipelines)."""
    if isinstance(state, JobState):
        return state
    if isinstance(state, PipelineState) or str(state).startswith("PIPELINE_STATE_"):
        return pipeline_to_job_state(state)
    return JobState(state)


class TrialState(OpenEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    INFEASIBLE = "INFEASIBLE"

    def is_terminal(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)


class GoalType(OpenEnum):
    GOAL_TYPE_UNSPECIFIED = "GOAL_TYPE_UNSPECIFIED"
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class SearchAlgorithm(OpenEnum):
    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class ScaleType(OpenEnum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class MeasurementSelectionType(OpenEnum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


class PersistentResourceState(OpenEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    ERROR = "ERROR"
    REBOOTING = "REBOOTING"
    UPDATING = "UPDATING"


# Proto numbers (vertex-api.md "JSON encoding"): Google's REST clients send these.
_ENUM_NUMBERS: dict[str, dict[int, str]] = {
    "Strategy": {0: "STRATEGY_UNSPECIFIED", 1: "ON_DEMAND", 2: "LOW_COST", 3: "STANDARD", 4: "SPOT", 6: "FLEX_START"},
    "AcceleratorType": {
        0: "ACCELERATOR_TYPE_UNSPECIFIED", 1: "NVIDIA_TESLA_K80", 2: "NVIDIA_TESLA_P100",
        3: "NVIDIA_TESLA_V100", 4: "NVIDIA_TESLA_P4", 5: "NVIDIA_TESLA_T4", 6: "TPU_V2", 7: "TPU_V3",
        8: "NVIDIA_TESLA_A100", 9: "NVIDIA_A100_80GB", 10: "TPU_V4_POD", 11: "NVIDIA_L4",
        12: "TPU_V5_LITEPOD", 13: "NVIDIA_H100_80GB", 14: "NVIDIA_H100_MEGA_80GB",
        15: "NVIDIA_H200_141GB", 16: "NVIDIA_B200", 17: "NVIDIA_GB200", 18: "NVIDIA_RTX_PRO_6000",
    },
    "JobState": dict(enumerate(JobState.__members__)),
    "PipelineState": dict(enumerate(PipelineState.__members__)),
    "TrialState": dict(enumerate(TrialState.__members__)),
    "GoalType": dict(enumerate(GoalType.__members__)),
    "SearchAlgorithm": {0: "ALGORITHM_UNSPECIFIED", 2: "GRID_SEARCH", 3: "RANDOM_SEARCH"},
    "ScaleType": dict(enumerate(ScaleType.__members__)),
    "MeasurementSelectionType": dict(enumerate(MeasurementSelectionType.__members__)),
    "PersistentResourceState": {
        0: "STATE_UNSPECIFIED", 1: "PROVISIONING", 3: "RUNNING", 4: "STOPPING", 5: "ERROR",
        6: "REBOOTING", 7: "UPDATING",
    },
}
