"""Compute Engine reservations in the emulator: ``reservations.insert``, ``get``, ``list`` of
compute v1 (and ``zoneOperations.get`` for the insert's operation), shaped as Google's, and the
VMs the Vertex AI jobs that name one hold of it.

Served at ``/compute/v1/...`` on the emulator's host (:func:`add_compute_routes`): the
clients send compute calls there when their endpoint is the emulator
(:func:`airflow_gpu_sched.vertex.client.endpoints.compute_root`). Bodies are checked against the
compute table vendored from the discovery document (:mod:`airflow_gpu_sched.vertex.compute_schema`);
query parameters against each method's own (the discovery document's ``parameters``).
Errors come in compute's shape (``{"error": {"code", "message", "errors": [{"domain",
"reason", "message"}]}}``: compute's front end sends no ``status`` name).

Consumption: a job whose pools carry a SPECIFIC_RESERVATION affinity holds one VM of that
reservation per replica from admission (PENDING) until it ends (``inUseCount`` rises and falls
with it); an ANY_RESERVATION job holds VMs of the first matching READY reservation of its region
(one without ``specificReservationRequired``) with room, else on-demand capacity. A
reservation's VM properties must match the job's exactly (machine type and GPUs); an insert
completes at once (status READY; the operation DONE).

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import datetime
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.limits import parse_json
from airflow_gpu_sched.vertex.compute_schema import load as compute_table
from airflow_gpu_sched.vertex.models import CustomJobSpec
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp
from airflow_gpu_sched.vertex.reservations import Reservation, fit
from airflow_gpu_sched.vertex.strict_json import body_errors

SELF_LINK_ROOT = "https://www.googleapis.com/compute/v1/"
# compute v1 discovery document, each method's query parameters (its path parameters aside);
# reservations.list has no returnPartialSuccess in v1 (tests/test_reservations.py keeps them equal)
QUERY_PARAMETERS = {
    "reservations.insert": ("requestId",),
    "reservations.get": (),
    "reservations.list": ("filter", "maxResults", "orderBy", "pageToken"),
    "zoneOperations.get": (),
}
_HTTP_REASON = {400: "invalid", 404: "notFound", 409: "alreadyExists", 403: "forbidden"}


class ComputeError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "errors": [
            {"message": self.message, "domain": "global", "reason": _HTTP_REASON.get(self.code, "backendError")}]}}


class ReservationStore:
    """Reservations by full name (``projects/P/zones/Z/reservations/R``), wire JSON each."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(7_000_000_000_000_000_001)

    # ------------------------------------------------------------------ the API

    def insert(self, project: str, zone: str, body: dict, now: datetime) -> dict:
        errors = body_errors("reservations.insert", body, compute_table())
        if errors:
            raise ComputeError(400, "\n".join(text for _, text in errors))
        name = body.get("name")
        if not name:
            raise ComputeError(400, "Invalid value for field 'resource.name': ''. Must be a match of regex "
                                    "'[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
        full = f"projects/{project}/zones/{zone}/reservations/{name}"
        if full in self.items:
            raise ComputeError(409, f"The resource '{full}' already exists")
        specific = dict(body.get("specificReservation") or {})
        if "count" not in specific:
            raise ComputeError(400, "Invalid value for field 'resource.specificReservation.count': '0'. "
                                    "Reservation count must be a positive number.")
        count = int(specific["count"])
        if count <= 0:
            raise ComputeError(400, f"Invalid value for field 'resource.specificReservation.count': '{count}'. "
                                    "Reservation count must be a positive number.")
        zone_link = f"{SELF_LINK_ROOT}projects/{project}/zones/{zone}"
        specific.update(count=str(count), inUseCount="0", assuredCount=str(count))
        self.items[full] = {
            **body, "kind": "compute#reservation", "id": str(next(self._ids)),
            "creationTimestamp": format_timestamp(now), "selfLink": f"{SELF_LINK_ROOT}{full}",
            "zone": zone_link, "status": "READY", "specificReservation": specific,
            "specificReservationRequired": bool(body.get("specificReservationRequired", False)),
        }
        op_id = str(next(self._ids))
        op_name = f"operation-{int(now.timestamp() * 1000)}-{op_id[-8:]}"
        operation = {"kind": "compute#operation", "id": op_id, "name": op_name, "zone": zone_link,
                     "operationType": "insert", "targetLink": f"{SELF_LINK_ROOT}{full}",
                     "targetId": self.items[full]["id"], "status": "DONE", "progress": 100,
                     "insertTime": format_timestamp(now), "startTime": format_timestamp(now),
                     "endTime": format_timestamp(now), "user": "emulator@example.com",
                     "selfLink": f"{zone_link}/operations/{op_name}"}
        self.operations[f"projects/{project}/zones/{zone}/operations/{op_name}"] = operation
        return operation

    def get(self, name: str) -> dict:
        found = self.items.get(name)
        if found is None:
            raise ComputeError(404, f"The resource '{name}' was not found")
        return found

    def get_operation(self, name: str) -> dict:
        found = self.operations.get(name)
        if found is None:
            raise ComputeError(404, f"The resource '{name}' was not found")
        return found

    def list(self, project: str, zone: str, page_token: str = "", max_results: int | None = None) -> dict:
        prefix = f"projects/{project}/zones/{zone}/reservations/"
        names = sorted(n for n in self.items if n.startswith(prefix))
        size = min(max_results or 500, 500)
        # only a token this list could have answered (a short decimal): never int() of any digits
        if page_token and not re.fullmatch(r"[0-9]{1,9}", page_token):
            raise ComputeError(400, "Invalid value for field 'pageToken'.")
        start = int(page_token) if page_token else 0
        page = names[start:start + size]
        body: dict[str, Any] = {"kind": "compute#reservationList", "id": f"{prefix.rstrip('/')}",
                                "selfLink": f"{SELF_LINK_ROOT}{prefix.rstrip('/')}",
                                "items": [self.items[n] for n in page]}
        if start + size < len(names):
            body["nextPageToken"] = str(start + size)
        return body

    # ------------------------------------------------------------------ consumption

    def choose(self, wanted: str, location: str, spec: CustomJobSpec, vms: int) -> str | None:
        """The reservation a job may take ``vms`` VMs of now: its named one, or for ``"ANY"`` the
        first matching READY one of its region open to any consumer; None: none has room."""
        if wanted != "ANY":
            found = self.items.get(wanted)
            return wanted if found is not None and not fit(spec, Reservation.model_validate(found)).problems else None
        for name, found in sorted(self.items.items()):
            zone = name.split("/")[3]
            if zone.rsplit("-", 1)[0] != location or found.get("specificReservationRequired"):
                continue
            if not fit(spec, Reservation.model_validate(found)).problems:
                return name
        return None

    def take(self, name: str, vms: int) -> None:
        specific = self.items[name]["specificReservation"]
        specific["inUseCount"] = str(int(specific["inUseCount"]) + vms)

    def give_back(self, name: str, vms: int) -> None:
        found = self.items.get(name)
        if found is not None:
            specific = found["specificReservation"]
            specific["inUseCount"] = str(max(0, int(specific["inUseCount"]) - vms))

    def mismatch(self, name: str, spec: CustomJobSpec) -> list[str]:
        """Why a job can never run on ``name`` (a missing reservation, other VM properties); []
        when only free VMs are lacking (then it waits or fails: the scenario's variant)."""
        found = self.items.get(name)
        if found is None:
            return [f"reservation {name} does not exist"]
        problems = fit(spec, Reservation.model_validate({**found, "status": "READY",
                                                         "specificReservation": {**found["specificReservation"],
                                                                                 "inUseCount": "0"}})).problems
        return [p for p in problems if "VMs free" not in p]


# ---------------------------------------------------------------------- HTTP


def add_compute_routes(app: Any, backend: Any, auth: Any) -> None:  # noqa: C901 (one dispatch)
    """``/compute/v1/projects/{p}/zones/{z}/reservations[/{r}]`` and ``.../operations/{o}``."""
    def answer(body: Any, status: int = 200) -> Response:
        return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), status_code=status, media_type="application/json")

    async def compute(request: Request, path: str) -> Response:
        parts = path.split("/")
        store: ReservationStore = backend.reservations
        rpc = None
        if len(parts) >= 5 and parts[0] == "projects" and parts[2] == "zones":
            if parts[4] == "reservations" and len(parts) == 5:
                rpc = {"POST": "reservations.insert", "GET": "reservations.list"}.get(request.method)
            elif parts[4] == "reservations" and len(parts) == 6 and request.method == "GET":
                rpc = "reservations.get"
            elif parts[4] == "operations" and len(parts) == 6 and request.method == "GET":
                rpc = "zoneOperations.get"
        if rpc is None:
            return answer(ComputeError(404, f"{request.method} /compute/v1/{path} is not a method the emulator "
                                            "serves.").body(), 404)
        backend.count(rpc)
        refusal = auth.admit(request.headers.get("authorization"), backend.stats)  # as the Vertex routes
        if refusal:
            return answer(ComputeError(401, refusal).body(), 401)
        from airflow_gpu_sched.emulator.methods import SYSTEM_PARAMETERS

        for name in request.query_params:
            if name not in QUERY_PARAMETERS[rpc] and name not in SYSTEM_PARAMETERS:
                return answer(ComputeError(400, f"Invalid JSON payload received. Unknown name \"{name}\": Cannot "
                                                f"bind query parameter. Field '{name}' could not be found in request "
                                                "message.").body(), 400)
        faults = backend.faults  # the same injected faults as the Vertex routes (refused before any work)
        if faults.error_rate and backend.rng.random() < faults.error_rate:
            backend.stats["faultsInjected"] += 1
            status = backend.rng.choice(faults.status_codes)
            return answer(ComputeError(status, f"Injected fault ({status}) for {rpc}.").body(), status)
        backend.advance()
        try:
            if rpc == "reservations.insert":
                raw = await request.body()
                try:
                    body = parse_json(raw) if raw else {}  # emulator/limits.py: depth, NaN, range
                except ApiError as exc:
                    raise ComputeError(400, exc.message) from None
                return answer(store.insert(parts[1], parts[3], body, backend.clock.now()))
            if rpc == "reservations.list":
                raw_max = request.query_params.get("maxResults")
                if raw_max not in (None, "") and not re.fullmatch(r"[0-9]{1,9}", raw_max):
                    raise ComputeError(400, f"Invalid value for field 'maxResults': '{raw_max}'.")
                return answer(store.list(parts[1], parts[3], request.query_params.get("pageToken", ""),
                                         int(raw_max) if raw_max else None))
            if rpc == "reservations.get":
                return answer(store.get(path))
            return answer(store.get_operation(path))
        except ComputeError as exc:
            return answer(exc.body(), exc.code)
        except ApiError as exc:
            return answer(exc.body(), exc.http_status)

    app.add_api_route("/compute/v1/{path:path}", compute, methods=["GET", "POST"], include_in_schema=False)
