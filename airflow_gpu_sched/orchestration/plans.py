"""Capacity plans: an ordered list of steps, each one strategy with its own knobs.

A plan advances on capacity outcomes only (a persistent pool busy past its wait or not
RUNNING, a FLEX_START wait that expired, a SPOT preemption budget spent, a create refused or a
pipeline failed for quota, a STANDARD stockout, a job not RUNNING within the step's bound): a
failure of the user's code never advances it. Each step may list ``locations``; by default the
next region is tried before the next step.

Every step takes ``capacity_wait_timeout``: how long its job may take, from its submission, to
be RUNNING for the first time (QUEUED for quota or capacity, PENDING while provisioning) before
the operator cancels it and moves on (None: no bound of its own; a persistent step: default 1
hour, which also bounds the wait for free replicas before submitting). :func:`running_bound` decides which
bound applies (with a ``deadline``, the smaller of it and deadline - expected_run_time).

Steps are typed objects, or plain dicts whose keys are the operators' own argument names::

    {"strategy": "PERSISTENT_RESOURCE", "persistent_resource_id": "pool-a", "capacity_wait_timeout": "10m"}
    {"strategy": "FLEX_START", "max_wait_duration": "2h", "locations": ["us-central1", "us-east4"]}
    {"strategy": "SPOT", "max_preemption_retries": 2}
    {"strategy": "STANDARD"}
    {"strategy": "RESERVATION", "reservation": "projects/p/zones/us-central1-a/reservations/h100-nightly"}
    {"strategy": "RESERVATION", "reservation": "ANY"}
    {"race": [{"strategy": "FLEX_START", "locations": ["us-east4"]}, {"strategy": "SPOT"}]}  # RaceStep
    {"strategy": "FLEX_START", "hardware": [{"machine_type": "a3-highgpu-8g", "accelerator_type":
     "NVIDIA_H100_80GB", "accelerator_count": 8}, {"machine_type": "a2-highgpu-4g", ...}]}  # .hardware

Any step takes ``region_order="observed"``: its locations are tried in the order of the capacity
this installation observed there recently (:mod:`.observed`), instead of as given.

May import: vertex, orchestration; airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from airflow_gpu_sched.vertex.models import Scheduling
from airflow_gpu_sched.vertex.wire_scalars import parse_duration
from airflow_gpu_sched.orchestration.hardware import HardwareError
from airflow_gpu_sched.vertex.rules import PERSISTENT_RESOURCE_ID, Violation

STRATEGIES = ("PERSISTENT_RESOURCE", "FLEX_START", "SPOT", "STANDARD", "RESERVATION")
REGION_ORDERS = ("given", "observed", "cheapest")  # "cheapest": orchestration/cheapest.py


@dataclass(frozen=True)
class Step:
    strategy: ClassVar[str] = "STANDARD"
    locations: tuple[str, ...] = ()  # empty: the operator's location
    capacity_wait_timeout: timedelta | None = None  # the job must be RUNNING within this (None: no bound)
    region_order: str | None = None  # "observed": by recent capacity; "cheapest": by expected cost (None, "given": as listed)
    max_price_per_gpu_hour: float | None = None  # run only where the price table says at most this (budget.py)
    hardware: tuple[Any, ...] = ()  # hardware.Hardware alternatives (one once the plan is expanded; (): the job's own)
    hardware_origin: str | None = None  # where they were given (plan[1].hardware[0]): errors name it
    hardware_order: str | None = None  # "observed" / "cheapest": the alternatives ranked at the run's start (hardware_order.py)

    def scheduling(self, timeout: timedelta | None, max_wait: timedelta | None = None) -> dict[str, Any]:
        block: dict[str, Any] = {"strategy": self.strategy}
        if timeout is not None:
            block["timeout"] = timeout
        return block

    @property
    def resource_id(self) -> str | None:
        """The persistent resource this step runs on, if any."""
        return None

    def describe(self) -> str:
        knobs = ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                          if f.name not in ("locations", "hardware", "hardware_origin", "hardware_order")
                          and getattr(self, f.name) is not None)
        return (f"{self.strategy}({knobs})" if knobs else self.strategy) + self.hardware_text

    @property
    def hardware_text(self) -> str:
        """`` on 8 x a3-highgpu-8g (...)`` when the step names its hardware."""
        return " on " + " | ".join(str(h) for h in self.hardware) if self.hardware else ""


@dataclass(frozen=True)
class StandardStep(Step):
    """On-demand VMs: advances when the create is refused for quota (429 RESOURCE_EXHAUSTED) or
    the service gives up for want of capacity ("Resources are insufficient in region: ...")."""

    strategy: ClassVar[str] = "STANDARD"


@dataclass(frozen=True)
class FlexStartStep(Step):
    strategy: ClassVar[str] = "FLEX_START"
    max_wait_duration: timedelta | None = Scheduling.DEFAULT_MAX_WAIT  # with observed_wait: the most it may be
    observed_wait: bool | None = None  # max_wait_duration="observed[:<max>]": learned per region (learned_wait.py)
    learned_waits: tuple[tuple[str, timedelta], ...] | None = None  # region -> wait, decided when the run starts

    def wait_in(self, location: str | None) -> timedelta | None:
        """The wait this step asks for in ``location``: the learned one when there is one."""
        if self.observed_wait and location is not None:
            return dict(self.learned_waits or ()).get(location, self.max_wait_duration)
        return self.max_wait_duration

    def scheduling(self, timeout: timedelta | None, max_wait: timedelta | None = None) -> dict[str, Any]:
        block = super().scheduling(timeout)
        wait = max_wait if max_wait is not None else self.max_wait_duration
        if wait is not None:
            block["maxWaitDuration"] = wait
        return block


@dataclass(frozen=True)
class SpotStep(Step):
    strategy: ClassVar[str] = "SPOT"
    max_preemption_retries: int = 3
    observed_preemptions: tuple[tuple[str, float], ...] | None = None  # region -> per run (cost objective)

    def preemptions_in(self, location: str | None) -> float:
        """Preemptions a run is expected to take in ``location`` (0 unless observed)."""
        return dict(self.observed_preemptions or ()).get(location or "", 0.0)


@dataclass(frozen=True)
class PersistentResourceStep(Step):
    strategy: ClassVar[str] = "PERSISTENT_RESOURCE"
    persistent_resource_id: str = ""
    capacity_wait_timeout: timedelta | None = timedelta(hours=1)

    @property
    def resource_id(self) -> str | None:
        return self.persistent_resource_id.rsplit("/", 1)[-1]

    def scheduling(self, timeout: timedelta | None, max_wait: timedelta | None = None) -> dict[str, Any]:
        return {"timeout": timeout} if timeout is not None else {}  # its VMs exist: no capacity strategy

    def describe(self) -> str:
        return f"PERSISTENT_RESOURCE({self.resource_id}, capacity_wait_timeout={self.capacity_wait_timeout})"  # no hardware


@dataclass(frozen=True)
class ReservationStep(Step):
    """A Compute Engine reservation: every pool's ``machineSpec.reservationAffinity`` names it
    (``"ANY"``: any matching reservation, else on-demand VMs). A specific reservation is read first
    (:mod:`airflow_gpu_sched.vertex.reservations`): the plan moves on when it is not READY, holds
    other VMs than the job's, or has too few free VMs for every replica. Its job draws on the
    on-demand GPU quota; it must be RUNNING within ``capacity_wait_timeout`` (default 30 min: a
    reservation has its VMs, so a long wait means another consumer took them)."""

    strategy: ClassVar[str] = "RESERVATION"
    reservation: str = ""
    capacity_wait_timeout: timedelta | None = timedelta(minutes=30)

    def scheduling(self, timeout: timedelta | None, max_wait: timedelta | None = None) -> dict[str, Any]:
        return {"timeout": timeout} if timeout is not None else {}  # on-demand VMs of the reservation

    def machine_spec_extra(self) -> dict[str, Any]:
        from airflow_gpu_sched.vertex.reservations import affinity

        return {"reservationAffinity": affinity(self.reservation)}

    @property
    def specific(self) -> str | None:
        """The reservation's full name, or None for ANY."""
        return None if self.reservation == "ANY" else self.reservation

    def describe(self) -> str:
        return f"RESERVATION({self.reservation})" + self.hardware_text


STEP_TYPES: dict[str, type[Step]] = {t.strategy: t for t in (PersistentResourceStep, FlexStartStep, SpotStep,
                                                              StandardStep, ReservationStep)}
_DURATIONS = {"max_wait_duration", "capacity_wait_timeout"}
_DECIDED = {"observed_wait", "learned_waits", "observed_preemptions", "hardware_origin"}  # set from max_wait_duration="observed" and the history, not given


class PlanError(ValueError):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__("; ".join(str(v) for v in violations))


def parse_step(value: Step | dict[str, Any], path: str = "plan[0]", ignore_templates: bool = False) -> Step:
    """A typed step from a step or a dict; errors name the key and the rule.

    With ``ignore_templates`` (DAG parse time), a value that is still a Jinja template is kept as
    is (a duration or a count: the step's default for now) and its rules are left for the parse
    after rendering; the strategy
    itself must be literal (the plan's shape is known when the DAG is parsed)."""
    if isinstance(value, Step):
        return value
    if not isinstance(value, dict):
        raise PlanError([Violation(path, f"a step is a dict or a Step (got {type(value).__name__})")])
    data = dict(value)
    strategy = str(data.pop("strategy", "")).upper()
    if strategy not in STEP_TYPES:
        raise PlanError([Violation(f"{path}.strategy", f"must be one of {', '.join(STRATEGIES)} "
                                                       f"(got {value.get('strategy')!r})")])
    cls = STEP_TYPES[strategy]
    names = {f.name: f.name for f in fields(cls) if f.name not in _DECIDED}
    kwargs: dict[str, Any] = {}
    problems = []
    templated = set()
    for key, raw in data.items():
        if key == "hardware" and ignore_templates and _has_template(raw):
            continue  # checked once rendered
        if key == "hardware" and key in names:
            try:
                kwargs["hardware"], kwargs["hardware_origin"] = _hardware(raw, f"{path}.hardware")
            except HardwareError as exc:
                problems += exc.violations
            continue
        if ignore_templates and key in names and _is_template(raw):
            templated.add(f"{path}.{key}")
            if key in _DURATIONS or key == "max_preemption_retries":
                continue  # the default until rendered
            kwargs[key] = tuple(raw) if isinstance(raw, list) else (raw,) if key == "locations" else raw
            continue  # text: the template itself (the job's checks skip templated values)
        if key not in names:
            problems.append(Violation(f"{path}.{key}", f"is not an argument of a {strategy} step "
                                                       f"(it takes: {', '.join(sorted(names))})"))
            continue
        try:
            if key == "max_wait_duration" and strategy == "FLEX_START" and is_observed_wait(raw):
                kwargs["observed_wait"], raw = True, observed_wait_max(raw)  # the rest: the user's max
            kwargs[names[key]] = _convert(key, raw)
        except ValueError as exc:
            problems.append(Violation(f"{path}.{key}", str(exc)))
    if problems:
        raise PlanError(problems)
    step = cls(**kwargs)
    problems = [v for v in check_step(step, path) if v.path not in templated]
    if problems:
        raise PlanError(problems)
    return step


def _hardware(raw: Any, path: str) -> tuple[tuple[Any, ...], str]:
    from airflow_gpu_sched.orchestration.hardware import parse_hardware

    found = parse_hardware(raw, path)
    return found, path if len(found) > 1 else f"{path}[0]"


def _has_template(raw: Any) -> bool:
    import json

    return _is_template(json.dumps(raw, default=str))


def is_observed_wait(raw: Any) -> bool:
    """``max_wait_duration="observed"`` or ``"observed:<the most it may be>"``."""
    return isinstance(raw, str) and (raw.strip() == "observed" or raw.strip().startswith("observed:"))


def observed_wait_max(raw: str) -> Any:
    """The user's max of an observed wait (the default max wait when none is given)."""
    _, _, most = raw.strip().partition(":")
    return most.strip() or Scheduling.DEFAULT_MAX_WAIT


def _is_template(raw: Any) -> bool:
    if isinstance(raw, str):
        return "{{" in raw or "{%" in raw
    return isinstance(raw, (list, tuple)) and any(_is_template(x) for x in raw)


def _convert(key: str, raw: Any) -> Any:
    if key in _DURATIONS:
        return None if raw is None else parse_duration(raw)
    if key == "locations":
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, (list, tuple)) or not all(isinstance(x, str) and x for x in raw):
            raise ValueError("must be a list of region names")
        return tuple(raw)
    if key in ("region_order", "hardware_order"):
        if raw is not None and raw not in REGION_ORDERS:
            raise ValueError(f"must be one of {', '.join(REGION_ORDERS)} (got {raw!r})")
    if key == "max_price_per_gpu_hour":
        if isinstance(raw, str):  # a rendered template is text
            try:
                raw = float(raw)
            except ValueError:
                raise ValueError(f"must be a number >= 0, per GPU-hour in the price table's currency (got {raw!r})") from None
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw >= 0):
            raise ValueError(f"must be a number >= 0, per GPU-hour in the price table's currency (got {raw!r})")
        return None if raw is None else float(raw)
    if key == "max_preemption_retries":
        if isinstance(raw, str) and raw.strip().isdigit():  # a rendered template is text
            raw = int(raw)
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
            raise ValueError(f"must be an integer >= 0 (got {raw!r})")
    return raw


def check_step(step: Step, path: str) -> list[Violation]:
    found = []
    if step.capacity_wait_timeout is not None and step.capacity_wait_timeout < timedelta(0):
        found.append(Violation(f"{path}.capacity_wait_timeout", "must be 0 or more (None: no bound)"))
    if isinstance(step, FlexStartStep) and step.max_wait_duration is not None and step.max_wait_duration < timedelta(0):
        found.append(Violation(f"{path}.max_wait_duration", "must be 0 (wait forever) or more"))
    if isinstance(step, PersistentResourceStep) and not PERSISTENT_RESOURCE_ID.fullmatch(step.resource_id or ""):
        found.append(Violation(f"{path}.persistent_resource_id",
                               f"{step.persistent_resource_id!r} is not a persistent resource id: 1-63 lowercase "
                               "letters, digits and '-', starting with a letter"))
    if isinstance(step, PersistentResourceStep) and step.hardware:
        found.append(Violation(f"{path}.hardware", "a PERSISTENT_RESOURCE step runs on its resource's machines: "
                                                   "give hardware alternatives to the other steps"))
    if isinstance(step, ReservationStep):
        from airflow_gpu_sched.vertex.reservations import check_reservation

        found += check_reservation(step.reservation, f"{path}.reservation", step.locations)
    return found


def check_regions(steps: list[Step], default_location: str) -> list[Violation]:
    """Rules that need the operator's location: a reservation step without ``locations`` runs
    there, so its reservation's zone must be in it."""
    from airflow_gpu_sched.vertex.reservations import check_reservation

    return [v for index, step in enumerate(steps)
            if isinstance(step, ReservationStep) and not step.locations and not _is_template(step.reservation)
            for v in check_reservation(step.reservation, f"plan[{index}].reservation", (default_location,))]


def parse_plan(values: Any, ignore_templates: bool = False, hardware: Any = None) -> list[Step]:
    """The steps; ``hardware``: the operator's alternatives, for every step that names none. A step
    of N hardware alternatives is N steps of one, in order (orchestration/hardware.py)."""
    from airflow_gpu_sched.orchestration.hardware import expand

    if not isinstance(values, (list, tuple)) or not values:
        raise PlanError([Violation("plan", "must be a non-empty list of steps")])
    steps, problems = [], []
    default = _default_hardware(hardware, ignore_templates)
    for index, value in enumerate(values):
        try:
            if isinstance(value, RaceStep) or (isinstance(value, dict) and "race" in value):
                steps.append(parse_race(value, f"plan[{index}]", ignore_templates, default))
                continue
            step = _with_default(parse_step(value, f"plan[{index}]", ignore_templates), default)
            steps += expand(step)
        except PlanError as exc:
            problems += exc.violations
    if problems:
        raise PlanError(list(dict.fromkeys(problems)))
    return steps


def _default_hardware(hardware: Any, ignore_templates: bool) -> tuple[tuple[Any, ...], str] | None:
    """The operator's ``hardware=``, parsed (errors name ``hardware[k].<field>``)."""
    if hardware is None or (ignore_templates and _has_template(hardware)):
        return None
    try:
        return _hardware(hardware, "hardware")
    except HardwareError as exc:
        raise PlanError(exc.violations) from None


def _with_default(step: Step, default: tuple[tuple[Any, ...], str] | None) -> Step:
    if default is None or step.hardware or isinstance(step, PersistentResourceStep):
        return step
    return replace(step, hardware=default[0], hardware_origin=default[1])


def positions(steps: list[Step], default_location: str, regions_first: bool = True) -> list[tuple[int, str]]:
    """Every (step index, location) the plan may try, in order."""
    per_step = [list(step.locations) or [default_location] for step in steps]
    if regions_first:
        return [(i, loc) for i, locs in enumerate(per_step) for loc in locs]
    order, depth = [], max(len(locs) for locs in per_step)
    for d in range(depth):
        order += [(i, locs[d]) for i, locs in enumerate(per_step) if d < len(locs)]
    return order


def running_bound(step: Step, since: datetime, deadline: datetime | None = None,
                  expected_run_time: timedelta | None = None) -> tuple[datetime, str] | None:
    """By when the step's job must first be RUNNING, and why; None when nothing bounds it.

    ``since``: when the job was submitted. The step's own ``capacity_wait_timeout`` counts from
    ``since``; a plan ``deadline`` implies one too (the job must start by deadline -
    expected_run_time to finish in time); the smaller wins. FLEX_START takes no deadline bound
    here: its ``maxWaitDuration`` is clipped to the deadline and the service enforces it (an
    operator bound at the same instant would only race it).
    """
    bounds = []
    if step.capacity_wait_timeout is not None:
        bounds.append((since + step.capacity_wait_timeout,
                       f"capacity_wait_timeout={_seconds(step.capacity_wait_timeout)} of {step.strategy}"))
    if deadline is not None and not isinstance(step, FlexStartStep):
        needed = expected_run_time or timedelta(0)
        bounds.append((deadline - needed, f"deadline {deadline.isoformat()} - expected_run_time {_seconds(needed)}"))
    return min(bounds, key=lambda b: b[0]) if bounds else None


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


# ---------------------------------------------------------------------------------------- races

RACE_STRATEGIES = ("FLEX_START", "SPOT", "STANDARD")  # a persistent pool's capacity is known before submitting


@dataclass(frozen=True)
class RaceStep(Step):
    """A hedged race: every member is submitted at once (each under its own submission key),
    the first to reach RUNNING wins and the others are cancelled at once; when every member
    ends on a capacity outcome, the plan moves on. ``{"race": [step, step, ...]}``.

    Rules (:func:`parse_race`): at least 2 members; each a plain FLEX_START, SPOT or STANDARD
    step (no nested race, no persistent resource: its free replicas are read before a
    submission, so it is a step of its own before the race); each runs in one region, its
    ``locations`` holding at most one (none: the operator's location). To race two regions,
    list one member per region. A race is one position of the plan: the race itself has no
    ``locations``, and ``regions_first`` orders it like any step.
    """

    strategy: ClassVar[str] = "RACE"
    members: tuple[Step, ...] = ()

    def scheduling(self, timeout: timedelta | None, max_wait: timedelta | None = None) -> dict[str, Any]:
        return self.members[0].scheduling(timeout, max_wait)  # a job built for the race as a whole: its first member's

    def member_location(self, index: int, default: str) -> str:
        locations = self.members[index].locations
        return locations[0] if locations else default

    def describe(self) -> str:
        return "RACE(" + " | ".join(m.describe() + (f"@{m.locations[0]}" if m.locations else "")
                                   for m in self.members) + ")"


def parse_race(value: RaceStep | dict[str, Any], path: str = "plan[0]", ignore_templates: bool = False,
               hardware: tuple[tuple[Any, ...], str] | None = None) -> RaceStep:
    """A race step from ``{"race": [step, ...]}``; errors name the member and the rule."""
    if isinstance(value, RaceStep):
        members: Any = list(value.members)
        extra: list[str] = []
    else:
        members = value.get("race")
        extra = sorted(k for k in value if k != "race")
    problems = [Violation(f"{path}.{k}", "is not a key of a race step (it takes only: race, a list of steps)")
                for k in extra]
    if not isinstance(members, (list, tuple)) or len(members) < 2:
        got = len(members) if isinstance(members, (list, tuple)) else type(members).__name__
        raise PlanError([*problems, Violation(f"{path}.race", f"must be a list of at least 2 steps (got {got})")])
    parsed = []
    for index, member in enumerate(members):
        where = f"{path}.race[{index}]"
        if isinstance(member, RaceStep) or (isinstance(member, dict) and "race" in member):
            problems.append(Violation(where, "a race member is a plain step: races do not nest"))
            continue
        try:
            step = parse_step(member, where, ignore_templates)
        except PlanError as exc:
            problems += exc.violations
            continue
        if step.strategy not in RACE_STRATEGIES:
            problems.append(Violation(f"{where}.strategy", f"a race member is one of {', '.join(RACE_STRATEGIES)} "
                                                           f"(got {step.strategy}: put it as a step before the race)"))
        if len(step.locations) > 1:
            problems.append(Violation(f"{where}.locations", "a race member runs in one region (got "
                                                            f"{len(step.locations)}): list one member per region"))
        step = _with_default(step, hardware)
        if len(step.hardware) > 1:
            problems.append(Violation(f"{where}.hardware", "a race member runs on one hardware alternative (got "
                                                           f"{len(step.hardware)}): list one member per alternative"))
        parsed.append(step)
    if problems:
        raise PlanError(problems)
    return RaceStep(members=tuple(parsed))
