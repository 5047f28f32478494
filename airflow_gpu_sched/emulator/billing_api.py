"""The Cloud Billing Catalog API's ``GET /v1/services/{service}/skus`` (``services.skus.list``) on
the emulator's host, answered from a vendored SAMPLE catalog (``data/billing_skus.SAMPLE.json``:
made-up prices in Google's shape, never real ones).

Checked as the cloudbilling v1 discovery document (revision 20260901) has the method: query
parameters ``currencyCode``, ``startTime``, ``endTime``, ``pageSize`` (int32, default 5000),
``pageToken`` and the system parameters; anything else is refused with the front end's wording
(:func:`methods.unknown_parameter_error`). ``pageSize`` negative is a 400, unset/0 the default,
above 5000 coerced (AIP-158); ``pageToken`` must be one this method returned for the same
service, currency and time range (:mod:`.paging`). ``startTime``/``endTime``: RFC 3339, not in the
future (the emulated clock), both or neither, within one calendar month (assumed: in UTC, Google
says America/Los_Angeles). An unknown service is 404 (assumed). Currencies: USD, and a few with a
fixed SAMPLE conversion rate (``currencyConversionRate`` set as Google sets it); others 400
(assumed). The scenario's ``variants.billingSkus`` picks how the catalog words its tiers
(docs/fidelity.md, "Cloud Billing catalog").

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from datetime import datetime
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.methods import SYSTEM_PARAMETERS, unknown_parameter_error
from airflow_gpu_sched.emulator.paging import coerce_page_size, decode_token, encode_token, parse_page_size
from airflow_gpu_sched.vertex.billing import DEFAULT_PAGE_SIZE, SKUS_LIST_PARAMETERS

RPC = "skus.list"
# SAMPLE rates (not Google's): how many of the currency one USD buys
SAMPLE_RATES = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 150.0}


@functools.lru_cache(maxsize=1)
def sample() -> dict[str, Any]:
    text = resources.files("airflow_gpu_sched.emulator").joinpath("data/billing_skus.SAMPLE.json").read_text()
    return json.loads(text)


def catalog(variant: str) -> list[dict[str, Any]]:
    """The sample's SKUs as ``variant`` words them: ``"dws"`` (as vendored: OnDemand, Spot as
    usageType Preemptible, DWS flex-start SKUs), ``"no_dws"`` (no DWS SKUs: flex-start prices
    come from the user's table), ``"spot_in_description"`` (Spot SKUs with usageType OnDemand,
    told apart by "Spot" in the description only)."""
    skus = sample()["skus"]
    if variant == "no_dws":
        return [s for s in skus if not s["description"].startswith("DWS ")]
    if variant == "spot_in_description":
        changed = copy.deepcopy(skus)
        for s in changed:
            if s["category"]["usageType"] == "Preemptible":
                s["category"]["usageType"] = "OnDemand"
        return changed
    return skus


def _time(name: str, raw: str | None, now: datetime) -> datetime | None:
    if raw in (None, ""):
        return None
    try:
        value = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise ApiError("INVALID_ARGUMENT", f"Invalid value at '{_snake(name)}' (type.googleapis.com/"
                                           f"google.protobuf.Timestamp), Field '{_snake(name)}', Illegal timestamp "
                                           f"format; timestamps must end with 'Z' or have a valid timezone offset.") from None
    if value.tzinfo is None:
        raise ApiError("INVALID_ARGUMENT", f"{name} must carry a timezone ('Z' or an offset).")
    if value > now:
        raise ApiError("INVALID_ARGUMENT", f"{name} must not be in the future (timestamps in the future are not "
                                           "allowed).")
    return value


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _converted(sku: dict[str, Any], currency: str, rate: float) -> dict[str, Any]:
    if currency == "USD":
        return sku
    out = copy.deepcopy(sku)
    for info in out["pricingInfo"]:
        info["currencyConversionRate"] = rate
        for tier in info["pricingExpression"]["tieredRates"]:
            price = tier["unitPrice"]
            amount = (int(price["units"]) + price["nanos"] / 1e9) * rate
            units = int(amount)
            tier["unitPrice"] = {"currencyCode": currency, "units": str(units),
                                 "nanos": int(round((amount - units) * 1e9))}
    return out


def list_skus(service: str, query: dict[str, str], now: datetime, variant: str) -> dict[str, Any]:
    """One page of ``services/{service}/skus``, or an ApiError."""
    for name in query:
        if name not in SKUS_LIST_PARAMETERS and name not in SYSTEM_PARAMETERS:
            raise unknown_parameter_error(name)
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", service):
        raise ApiError("INVALID_ARGUMENT", f"Invalid resource field value in the request: parent "
                                           f"'services/{service[:64]}' does not match ^services/[^/]+$.")
    if service != sample()["service"]:
        raise ApiError("NOT_FOUND", f"Service services/{service} was not found.")
    currency = query.get("currencyCode") or "USD"
    if currency not in SAMPLE_RATES:
        raise ApiError("INVALID_ARGUMENT", f"currency_code {currency[:16]!r} is not supported.")
    start, end = _time("startTime", query.get("startTime"), now), _time("endTime", query.get("endTime"), now)
    if (start is None) != (end is None):
        raise ApiError("INVALID_ARGUMENT", "start_time and end_time must be given together (the time range as a "
                                           "whole is optional).")
    if start and end and (start >= end or (start.year, start.month) != (end.year, end.month)):
        raise ApiError("INVALID_ARGUMENT", "The time range [start_time, end_time) must be non-empty and within a "
                                           "single calendar month.")
    size = coerce_page_size(parse_page_size(query.get("pageSize"), "page_size"), DEFAULT_PAGE_SIZE,
                            DEFAULT_PAGE_SIZE)
    binding = ("skus", service, currency, query.get("startTime") or "", query.get("endTime") or "", variant)
    offset = int(decode_token(query["pageToken"], *binding, field="page_token")) if query.get("pageToken") else 0
    skus = catalog(variant)
    page = [_converted(s, currency, SAMPLE_RATES[currency]) for s in skus[offset:offset + size]]
    out: dict[str, Any] = {"skus": page}
    if offset + size < len(skus):
        out["nextPageToken"] = encode_token(offset + size, *binding)
    else:
        out["nextPageToken"] = ""  # Google's list answers carry an empty token at the end (assumed here)
    return out


def add_billing_routes(app: FastAPI, backend: Any, traffic: Any, auth: Any) -> None:
    """``GET /v1/services/{service}/skus``; register before the ``/v1/{path}`` catch-all."""

    def match(method: str, path: str) -> tuple[str, dict[str, str]] | None:
        return (RPC, {}) if method == "GET" and re.fullmatch(r"services/[^/]+/skus", path) else None

    async def skus(request: Request, path: str) -> Response:
        backend.count(RPC)
        refusal = auth.admit(request.headers.get("authorization"), backend.stats)
        if refusal:
            return _json(ApiError("UNAUTHENTICATED", refusal).body(), 401)
        faults = backend.faults  # the same injected faults as every other route, before any work
        if faults.error_rate and backend.rng.random() < faults.error_rate:
            backend.stats["faultsInjected"] += 1
            status = backend.rng.choice(faults.status_codes)
            name = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(status, "INTERNAL")
            return _json(ApiError(name, f"Injected fault ({status}) for {RPC}.").body(), status)
        backend.advance()
        service = path.split("/")[1]
        try:
            return _json(list_skus(service, dict(request.query_params), backend.clock.now(),
                                   backend.scenario.variants.billing_skus))
        except ApiError as exc:
            return _json(exc.body(), exc.http_status)

    async def route(request: Request, service: str) -> Response:
        return await recorded(request, f"services/{service}/skus")

    recorded = traffic.wrap(skus, match)
    app.add_api_route("/v1/services/{service}/skus", route, methods=["GET"], include_in_schema=False)


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), status_code=status,
                    media_type="application/json")


__all__ = ["RPC", "SAMPLE_RATES", "add_billing_routes", "catalog", "list_skus", "sample"]
