"""Hardware alternatives inside a plan: a step tries 8 x H100, then 2 x 4 A100, ... (issue 43).

A step (or the operator, for each of its steps) takes ``hardware=[{"machine_type": ...,
"accelerator_type": ..., "accelerator_count": ..., "replica_count": ...}, ...]``. The plan tries
the alternatives as it tries regions: :func:`expand` turns a step of N alternatives into N steps
of one each, in the order given, so every alternative is a position of its own (its regions,
``regions_first``, its ``capacity_wait_timeout`` bound, the deadline, the budget and the quota
preflight apply to it as to any step); to race them, list one race member per alternative.

What an alternative changes in the job (:func:`rewrite_pools`), pure:

- every active pool's ``machineSpec`` gets its machine type and accelerators (FLEX_START needs
  the same machine configuration in every pool; one rule for every strategy keeps the job whole);
- ``replica_count`` is the number of machines in all: the primary pool keeps its 1, the second
  pool (workers, a copy of the primary when the job has none) holds the rest; 1 drops the workers;
- every pool's container gets :data:`ENV`: the training script reads the hardware it got
  (``GPU_SCHED_HARDWARE``, JSON of the four fields; ``GPU_SCHED_ACCELERATOR_TYPE`` and
  ``GPU_SCHED_ACCELERATOR_COUNT``, per machine; ``GPU_SCHED_REPLICA_COUNT``) to set its batch size.

The strategy's rules (FLEX_START GPUs, SPOT on A2/A3, the machine's accelerator counts) stay in
:mod:`vertex.rules`: each alternative's job is checked by them, and :func:`name_violations`
points a violation on the rewritten machine spec back at ``plan[i].hardware[k].<field>``.

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from airflow_gpu_sched.vertex.rules import Violation

FIELDS = ("machine_type", "accelerator_type", "accelerator_count", "replica_count")
ENV_JSON, ENV_TYPE, ENV_COUNT, ENV_REPLICAS = ("GPU_SCHED_HARDWARE", "GPU_SCHED_ACCELERATOR_TYPE",
                                               "GPU_SCHED_ACCELERATOR_COUNT", "GPU_SCHED_REPLICA_COUNT")
ENV = (ENV_JSON, ENV_TYPE, ENV_COUNT, ENV_REPLICAS)
# a job path on the rewritten machine spec -> the alternative's field it comes from
_WIRE_FIELD = {"machineType": "machine_type", "acceleratorType": "accelerator_type",
               "acceleratorCount": "accelerator_count"}
_MACHINE_PATH = re.compile(r"workerPoolSpecs\[\d+\]\.(?:machineSpec(?:\.(\w+))?|(replicaCount))$")


@dataclass(frozen=True)
class Hardware:
    """One alternative. ``replica_count`` None: as many machines as the job's pools ask for."""

    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    replica_count: int | None = None

    def __str__(self) -> str:
        gpus = f" ({self.accelerator_count} x {self.accelerator_type})" if self.accelerator_type else ""
        return f"{self.replica_count or ''}{' x ' if self.replica_count else ''}{self.machine_type}{gpus}"

    def record(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}


def parse_hardware(raw: Any, path: str) -> tuple[Hardware, ...]:
    """The alternatives from a list of dicts (or Hardware); errors name ``<path>[k].<field>``."""
    if isinstance(raw, (dict, Hardware)):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise HardwareError([Violation(path, "must be a non-empty list of {machine_type, accelerator_type, "
                                             "accelerator_count, replica_count} dicts")])
    found, problems = [], []
    for index, item in enumerate(raw):
        where = f"{path}[{index}]"
        if isinstance(item, Hardware):
            found.append(item)
            continue
        if not isinstance(item, dict):
            problems.append(Violation(where, f"an alternative is a dict (got {type(item).__name__})"))
            continue
        problems += [Violation(f"{where}.{key}", f"is not a field of a hardware alternative (it takes: "
                                                 f"{', '.join(FIELDS)})") for key in item if key not in FIELDS]
        machine = item.get("machine_type")
        if not isinstance(machine, str) or not machine:
            problems.append(Violation(f"{where}.machine_type", "is required: a machine type such as 'a3-highgpu-8g'"))
        accelerator = item.get("accelerator_type")
        if accelerator is not None and (not isinstance(accelerator, str) or not accelerator):
            problems.append(Violation(f"{where}.accelerator_type", f"must be an accelerator type name (got {accelerator!r})"))
        counts = {name: _count(item.get(name)) for name in ("accelerator_count", "replica_count")}
        for name, count in counts.items():
            if count == -1:
                problems.append(Violation(f"{where}.{name}", f"must be a whole number >= 1 (got {item.get(name)!r})"))
        if (accelerator is None) != (item.get("accelerator_count") is None):
            problems.append(Violation(f"{where}.accelerator_type", "set accelerator_type and accelerator_count "
                                                                   "together, or neither"))
        found.append(Hardware(machine if isinstance(machine, str) else "", accelerator,
                              *(c if c != -1 else None for c in counts.values())))
    if problems:
        raise HardwareError(problems)
    return tuple(found)


def _count(value: Any) -> int | None:
    """A count (a rendered template is text); -1: not a whole number >= 1."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else -1


class HardwareError(ValueError):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__("; ".join(str(v) for v in violations))


def expand(step: Any) -> list[Any]:
    """A step of N alternatives as N steps of one, in order (each remembers where it came from)."""
    if len(step.hardware) < 2:
        return [step]
    origin = step.hardware_origin or "hardware"
    return [replace(step, hardware=(hw,), hardware_origin=f"{origin}[{k}]") for k, hw in enumerate(step.hardware)]


def with_origin(step: Any, path: str) -> Any:
    """The step's alternatives named from ``path`` (``plan[1].hardware``; the operator's: ``hardware``)."""
    if not step.hardware or step.hardware_origin:
        return step
    return replace(step, hardware_origin=path if len(step.hardware) > 1 else f"{path}[0]")


def env(hw: Hardware, replicas: int) -> dict[str, str]:
    """What the training script reads: the hardware it got."""
    record = {**hw.record(), "replica_count": replicas}
    return {ENV_JSON: json.dumps(record, sort_keys=True), ENV_TYPE: hw.accelerator_type or "",
            ENV_COUNT: str(hw.accelerator_count or 0), ENV_REPLICAS: str(replicas)}


def rewrite_pools(pools: list[dict[str, Any]], hw: Hardware) -> list[dict[str, Any]]:
    """The job's pools (REST JSON) on ``hw``: every active pool's machine spec, the replicas, the env."""
    pools = [dict(p) if p else p for p in pools]
    if hw.replica_count is not None and pools and pools[0]:
        workers = hw.replica_count - 1
        if len(pools) < 2:
            pools.append({})
        if workers == 0:
            pools[1] = {}  # kept as an empty pool: the positions of later pools do not move
        else:
            pools[1] = {**(pools[1] or pools[0]), "replicaCount": workers}
    machine: dict[str, Any] = {"machineType": hw.machine_type}
    if hw.accelerator_type is not None:
        machine.update(acceleratorType=hw.accelerator_type, acceleratorCount=hw.accelerator_count)
    total = sum(int(p.get("replicaCount") or 1) for p in pools if p)
    extra = env(hw, total)
    out = []
    for pool in pools:
        if not pool:
            out.append(pool)
            continue
        kept = {k: v for k, v in (pool.get("machineSpec") or {}).items()
                if k not in ("machineType", "acceleratorType", "acceleratorCount")}  # e.g. reservationAffinity
        out.append({**pool, "machineSpec": {**kept, **machine}, **_with_env(pool, extra)})
    while len(out) > 1 and not out[-1]:
        out.pop()  # a trailing empty pool says nothing
    return out


def _with_env(pool: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
    for key in ("containerSpec", "pythonPackageSpec"):
        task = pool.get(key)
        if task is not None:
            own = [e for e in task.get("env") or [] if e.get("name") not in extra]
            return {key: {**task, "env": [*own, *({"name": k, "value": v} for k, v in extra.items())]}}
    return {}


def name_violations(found: list[Violation], origin: str | None) -> list[Violation]:
    """A violation on the machine spec (or replicas) a hardware alternative wrote, named by the
    alternative's field (``plan[1].hardware[0].accelerator_type``); others as they are."""
    if not origin:
        return found
    out = []
    for violation in found:
        match = _MACHINE_PATH.search(violation.path)
        if match is None:
            out.append(violation)
            continue
        field = _WIRE_FIELD.get(match.group(1) or "") or ("replica_count" if match.group(2) else None)
        out.append(Violation(f"{origin}.{field}" if field else origin, violation.rule))
    return out



def given_index(steps: list[Any], index: int) -> int:
    """The index in the plan as given (``plan[i]``) of the expanded plan's step ``index``."""
    return groups(steps)[index]


def groups(steps: list[Any]) -> list[int]:
    """Per step of the expanded plan, the index of the step it was given as: a step continues the
    one before it when both come from the same ``hardware`` list and its alternative is not yet in
    the group (alternatives may be reordered: ``hardware_order``)."""
    found: list[int] = []
    prefix, seen = None, set()
    for step in steps:
        origin = getattr(step, "hardware_origin", None) or ""
        match = re.fullmatch(r"(.*)\[(\d+)\]", origin)
        if match and found and match.group(1) == prefix and match.group(2) not in seen:
            seen.add(match.group(2))
            found.append(found[-1])
            continue
        prefix, seen = (match.group(1), {match.group(2)}) if match else (None, set())
        found.append(found[-1] + 1 if found else 0)
    return found


def reorder(steps: list[Any], orders: dict[str, list[int]] | None) -> list[Any]:
    """The expanded plan with each given step's alternatives in the decided order (``orders``:
    given index -> the alternatives, by their index in the list given, as ``hardware_order``
    ranked them). Idempotent: a plan already in that order stays as it is."""
    if not orders:
        return list(steps)
    given = groups(steps)
    out: list[Any] = []
    for index in dict.fromkeys(given):
        group = [s for s, g in zip(steps, given) if g == index]
        order = orders.get(str(index))
        if order and sorted(order) == sorted(alternative(s) for s in group):
            group = sorted(group, key=lambda s: order.index(alternative(s)))
        out += group
    return out


def alternative(step: Any) -> int:
    """The step's alternative, by its index in the ``hardware`` list given (0 for a step of one)."""
    match = re.search(r"\[(\d+)\]$", getattr(step, "hardware_origin", None) or "")
    return int(match.group(1)) if match else 0


def no_job_fields(step: Any) -> dict[str, Any]:
    """What an attempt that got no job (a quota skip, a busy pool) ran for: the alternative's
    accelerator and hardware, so the capacity history and the result stay per accelerator."""
    if not getattr(step, "hardware", None):
        return {}
    hw = step.hardware[0]
    return {"accelerator_type": hw.accelerator_type, "hardware": hw.record()}
