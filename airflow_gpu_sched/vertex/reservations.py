"""Compute Engine reservations as a Vertex AI job consumes them: the wire models of compute v1
``reservations`` (get, list, insert) and the pure rules of consuming one.

A custom job consumes a reservation through each pool's ``machineSpec.reservationAffinity``
(google/cloud/aiplatform/v1/reservation_affinity.proto): ``reservationAffinityType``
``NO_RESERVATION`` / ``ANY_RESERVATION`` ("consume any reservation available, falling back to
on-demand") / ``SPECIFIC_RESERVATION`` with ``key`` ``compute.googleapis.com/reservation-name``
and ``values`` the reservation's full resource name (``projects/P/zones/Z/reservations/R``).
Vertex AI consumes a reservation only when its VM properties match the job's exactly (machine
type, GPUs) (Google's "Use reservations with ..." pages).

:func:`fit` is the preflight's verdict (pure): a READY reservation, of the job's machine type
and accelerators, with free VMs (``count - inUseCount``) for every replica of the job.

May import: vertex; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict

from airflow_gpu_sched.vertex.models import CustomJobSpec, VertexModel
from airflow_gpu_sched.vertex.wire_scalars import Int64
from airflow_gpu_sched.vertex.rules import Violation

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
ANY = "ANY"
RESERVATION_NAME = re.compile(r"projects/(?P<project>[^/]+)/zones/(?P<zone>[a-z]+-[a-z]+[0-9]+-[a-z])/reservations/(?P<id>[a-z]([-a-z0-9]{0,61}[a-z0-9])?)")

_OPEN = ConfigDict(**{**VertexModel.model_config, "extra": "allow"})  # keep what compute sends that we do not read


class AcceleratorConfig(VertexModel):
    model_config = _OPEN
    accelerator_type: str | None = None  # compute's name: "nvidia-h100-80gb"
    accelerator_count: int | None = None


class ReservedInstanceProperties(VertexModel):
    model_config = _OPEN
    machine_type: str | None = None
    guest_accelerators: list[AcceleratorConfig] | None = None
    local_ssds: list[dict[str, Any]] | None = None


class SpecificReservation(VertexModel):
    model_config = _OPEN
    count: Int64 | None = None
    in_use_count: Int64 | None = None
    assured_count: Int64 | None = None
    instance_properties: ReservedInstanceProperties | None = None


class Reservation(VertexModel):
    """compute#reservation (the fields the preflight reads; the rest kept as sent)."""

    model_config = _OPEN
    kind: str | None = None
    id: str | None = None
    name: str | None = None  # the short name (compute's "name"), not the resource path
    zone: str | None = None  # a URL: .../projects/P/zones/Z
    self_link: str | None = None
    status: str | None = None  # CREATING, READY, DELETING, UPDATING, INVALID
    specific_reservation: SpecificReservation | None = None
    specific_reservation_required: bool | None = None

    @property
    def zone_name(self) -> str:
        return (self.zone or "").rstrip("/").rsplit("/", 1)[-1]

    @property
    def free(self) -> int:
        spec = self.specific_reservation
        return 0 if spec is None else max(0, (spec.count or 0) - (spec.in_use_count or 0))


class ReservationList(VertexModel):
    model_config = _OPEN
    kind: str | None = None
    items: list[Reservation] | None = None
    next_page_token: str | None = None


class ComputeOperation(VertexModel):
    """compute#operation (zonal): ``status`` PENDING / RUNNING / DONE, ``error.errors[]``."""

    model_config = _OPEN
    kind: str | None = None
    id: str | None = None
    name: str | None = None
    zone: str | None = None
    operation_type: str | None = None
    status: str | None = None
    target_link: str | None = None
    self_link: str | None = None
    error: dict[str, Any] | None = None


# ------------------------------------------------------------------------------- names, affinity


def parse_reservation_name(name: str) -> tuple[str, str, str] | None:
    """``projects/P/zones/Z/reservations/R`` -> (P, Z, R); None when it is not one."""
    found = RESERVATION_NAME.fullmatch(name or "")
    return (found["project"], found["zone"], found["id"]) if found else None


def region_of_zone(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def check_reservation(value: Any, path: str, regions: tuple[str, ...] = ()) -> list[Violation]:
    """A step's ``reservation``: ``"ANY"`` or a full reservation name whose zone is in every
    region the step runs in (a zonal reservation is consumed only by VMs in its zone)."""
    if value == ANY:
        return []
    if not isinstance(value, str) or parse_reservation_name(value) is None:
        return [Violation(path, f"{value!r} is not a reservation: give 'ANY' or its full name "
                                "'projects/PROJECT/zones/ZONE/reservations/NAME' (e.g. "
                                "projects/my-project/zones/us-central1-a/reservations/h100-nightly)")]
    zone = parse_reservation_name(value)[1]  # type: ignore[index]
    wrong = [r for r in regions if region_of_zone(zone) != r]
    if wrong:
        return [Violation(path, f"the reservation is in zone {zone} (region {region_of_zone(zone)}): a step that "
                                f"uses it can only run there, not in {', '.join(wrong)} (set the step's "
                                f"locations to [{region_of_zone(zone)!r}])")]
    return []


def affinity(reservation: str) -> dict[str, Any]:
    """The ``machineSpec.reservationAffinity`` for a step's ``reservation``."""
    if reservation == ANY:
        return {"reservationAffinityType": "ANY_RESERVATION"}
    return {"reservationAffinityType": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY, "values": [reservation]}


def reserved_name(affinity_json: dict[str, Any] | None) -> str | None:
    """The reservation a SPECIFIC_RESERVATION affinity names (the emulator reads it)."""
    if not affinity_json or affinity_json.get("reservationAffinityType") not in ("SPECIFIC_RESERVATION", 3):
        return None
    values = affinity_json.get("values") or []
    return values[0] if affinity_json.get("key") == RESERVATION_KEY and values else None


def compute_accelerator(vertex_name: str) -> str:
    """Vertex's ``NVIDIA_H100_80GB`` -> compute's ``nvidia-h100-80gb``."""
    return vertex_name.lower().replace("_", "-")


# ------------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class Fit:
    """The preflight's verdict: ``problems`` empty -> the job can run on the reservation now."""

    problems: tuple[str, ...]
    free: int
    needed: int
    count: int
    in_use: int


def fit(spec: CustomJobSpec, reservation: Reservation) -> Fit:
    """Can every replica of the job take a VM of this reservation now? Each problem worded."""
    problems = []
    specific = reservation.specific_reservation or SpecificReservation()
    props = specific.instance_properties or ReservedInstanceProperties()
    count, in_use = specific.count or 0, specific.in_use_count or 0
    needed = sum(pool.replicas for _, pool in spec.active_pools())
    if reservation.status != "READY":
        problems.append(f"status is {reservation.status or 'unknown'}, not READY")
    if props.local_ssds:  # documented: "Vertex AI can't consume reservations of VMs that have Local SSD disks"
        problems.append("its VMs have Local SSD disks attached (localSsds), which Vertex AI cannot consume")
    reserved_gpus = sorted((compute_accelerator(a.accelerator_type.rsplit("/", 1)[-1]) if a.accelerator_type else "",
                            a.accelerator_count or 0) for a in props.guest_accelerators or [])
    for index, pool in spec.active_pools():
        machine = pool.machine_spec
        wanted_type = machine.machine_type if machine else None
        if wanted_type != props.machine_type:
            problems.append(f"workerPoolSpecs[{index}] is {wanted_type}, the reservation holds {props.machine_type} "
                            "(Vertex AI consumes a reservation only of the job's exact machine type)")
        gpus = [] if machine is None or machine.accelerator_type is None else [
            (compute_accelerator(machine.accelerator_type.value), machine.accelerator_count or 0)]
        if gpus != reserved_gpus:
            problems.append(f"workerPoolSpecs[{index}] asks for {_gpus(gpus)}, the reservation's VMs carry "
                            f"{_gpus(reserved_gpus)}")
    free = max(0, count - in_use)
    if needed > free:
        problems.append(f"{free} of {count} VMs free ({in_use} in use), the job needs {needed} (one per replica)")
    return Fit(tuple(dict.fromkeys(problems)), free, needed, count, in_use)


def _gpus(pairs: list[tuple[str, int]]) -> str:
    return " + ".join(f"{n} x {t}" for t, n in pairs) or "no GPUs"
