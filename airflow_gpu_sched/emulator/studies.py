"""Hyperparameter tuning in the emulator: which parameters each trial gets, and the metric
value it reports. Both are deterministic (seeded), so tests can predict the best trial.

Parameters (per trial ``n``, 1-based):
- ``GRID_SEARCH``: the n-th point of the grid (cartesian product of every parameter's values in
  the order given; INTEGER: every integer from min to max; DOUBLE: 5 evenly spaced points),
  wrapping around when there are more trials than points.
- otherwise (``RANDOM_SEARCH``, unspecified): ``random.Random(f"{seed}:{tuning job id}:{n}")``
  draws each parameter in order: DOUBLE uniform in [min, max] (log-uniform with
  UNIT_LOG_SCALE), INTEGER uniform over min..max, DISCRETE and CATEGORICAL a uniform choice.

Metric: every parameter value is placed on [0, 1] (``position``): DOUBLE and INTEGER as
``(v - min) / (max - min)`` (on the log scale with UNIT_LOG_SCALE), DISCRETE and CATEGORICAL as
``index / (len(values) - 1)`` (0.5 when there is a single value). ``d`` is the mean of
``(position - 0.7) ** 2`` over the parameters. A MAXIMIZE metric reports ``1 - d``, a MINIMIZE
metric reports ``d``: the best trial is the one whose parameters sit closest to 70 % of their
ranges, whatever the goal.

May import: vertex; never airflow.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from airflow_gpu_sched.vertex.job_type_models import ParameterSpec, StudySpec
from airflow_gpu_sched.vertex.enums import GoalType, ScaleType, SearchAlgorithm

TARGET = 0.7
GRID_DOUBLE_POINTS = 5


def _values(parameter: ParameterSpec) -> list[Any]:
    if parameter.integer_value_spec is not None:
        spec = parameter.integer_value_spec
        return list(range(int(spec.min_value or 0), int(spec.max_value or 0) + 1))
    if parameter.double_value_spec is not None:
        low, high = parameter.double_value_spec.min_value or 0.0, parameter.double_value_spec.max_value or 0.0
        return [low + (high - low) * i / (GRID_DOUBLE_POINTS - 1) for i in range(GRID_DOUBLE_POINTS)]
    if parameter.discrete_value_spec is not None:
        return list(parameter.discrete_value_spec.values or [])
    return list((parameter.categorical_value_spec.values if parameter.categorical_value_spec else None) or [])


def suggest(study: StudySpec, seed: int, job_id: str, trial: int) -> dict[str, Any]:
    """Parameter values for trial number ``trial`` (1-based) of tuning job ``job_id``."""
    if study.algorithm is SearchAlgorithm.GRID_SEARCH:
        grid = list(itertools.product(*(_values(p) for p in study.parameters)))
        point = grid[(trial - 1) % len(grid)] if grid else ()
        return {p.parameter_id or "": v for p, v in zip(study.parameters, point)}
    rng = random.Random(f"{seed}:{job_id}:{trial}")
    chosen: dict[str, Any] = {}
    for parameter in study.parameters:
        if parameter.double_value_spec is not None:
            low, high = parameter.double_value_spec.min_value or 0.0, parameter.double_value_spec.max_value or 0.0
            if parameter.scale_type is ScaleType.UNIT_LOG_SCALE and low > 0:
                value: Any = math.exp(rng.uniform(math.log(low), math.log(high)))
            else:
                value = rng.uniform(low, high)
        elif parameter.integer_value_spec is not None:
            spec = parameter.integer_value_spec
            value = rng.randint(int(spec.min_value or 0), int(spec.max_value or 0))
        else:
            value = rng.choice(_values(parameter))
        chosen[parameter.parameter_id or ""] = value
    return chosen


def position(parameter: ParameterSpec, value: Any) -> float:
    """Where ``value`` sits in the parameter's range, from 0 to 1."""
    spec = parameter.double_value_spec or parameter.integer_value_spec
    if spec is not None:
        low, high, v = float(spec.min_value or 0), float(spec.max_value or 0), float(value)
        if parameter.scale_type is ScaleType.UNIT_LOG_SCALE and low > 0 and v > 0:
            low, high, v = math.log(low), math.log(high), math.log(v)
        return 0.5 if high == low else min(1.0, max(0.0, (v - low) / (high - low)))
    values = _values(parameter)
    if len(values) <= 1 or value not in values:
        return 0.5
    return values.index(value) / (len(values) - 1)


def metric_values(study: StudySpec, parameters: dict[str, Any]) -> dict[str, float]:
    """The final measurement of a trial with ``parameters``: metric id -> value."""
    specs = [p for p in study.parameters if (p.parameter_id or "") in parameters]
    distance = (sum((position(p, parameters[p.parameter_id or ""]) - TARGET) ** 2 for p in specs) / len(specs)
                if specs else 0.0)
    return {(m.metric_id or ""): round(distance if m.goal is GoalType.MINIMIZE else 1.0 - distance, 12)
            for m in study.metrics}
