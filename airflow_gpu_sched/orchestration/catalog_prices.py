"""Prices per GPU-hour from Google's billing catalog (``services.skus.list`` of the Vertex AI
service), mapped to (accelerator, strategy, region), merged with the user's price table for what
the catalog lacks. The mapping is pure; :class:`CatalogCache` is the one place it is fetched.

The rule (docs/cost.md; which parts are documented, observed or assumed: docs/fidelity.md,
"Cloud Billing catalog"):

1. A SKU counts when its description names a GPU (:data:`GPU_NAMES`, longest name first) and
   training (``Training``), and not prediction; its ``pricingExpression.usageUnit`` is ``h``
   (per hour; a GPU SKU's unit is one GPU, assumed) and its price is in the asked currency.
2. Strategy: a description naming DWS / Flex-start / Dynamic Workload Scheduler -> FLEX_START;
   else ``category.usageType`` ``Preemptible`` (or "Spot"/"Preemptible" in the description) ->
   SPOT; else ``OnDemand`` -> STANDARD. Other usage types (commitments) are not used.
   PERSISTENT_RESOURCE has no SKU of its own here: a persistent resource's GPUs bill while it
   exists, not per job, so its per-job price is the user's table's (0 if paid already).
3. Price: the ``pricingInfo`` with the latest ``effectiveTime``, its first tier (the lowest
   ``startUsageAmount``), ``units + nanos / 1e9``. One price for each region in ``serviceRegions``.
4. Two SKUs for one (accelerator, strategy, region): the higher price is kept (a budget must not
   be optimistic), and the clash is reported in ``skipped``.

A merged table is the user's table shape plus ``by_region``: ``{"currency": "USD",
"NVIDIA_L4": {"SPOT": 0.3}, "by_region": {"us-central1": {"NVIDIA_L4": {"SPOT": 0.28}}}}``; a
lookup (:func:`price_of`) prefers the region's price and falls back to the flat one.

May import: vertex; airflow only inside functions.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("airflow_gpu_sched.prices")

CATALOG = "catalog"
CATALOG_TTL_SECONDS = 86_400.0  # a day: Google's list price "up to 12 hours old at most" anyway

# description text -> accelerator type (Vertex's AcceleratorType names); longest first so
# "A100 80GB" wins over "A100" and "H100 Mega" over "H100"
GPU_NAMES: tuple[tuple[str, str], ...] = tuple(sorted((
    ("Nvidia Tesla T4", "NVIDIA_TESLA_T4"), ("Nvidia T4", "NVIDIA_TESLA_T4"),
    ("Nvidia Tesla V100", "NVIDIA_TESLA_V100"), ("Nvidia V100", "NVIDIA_TESLA_V100"),
    ("Nvidia Tesla P100", "NVIDIA_TESLA_P100"), ("Nvidia Tesla P4", "NVIDIA_TESLA_P4"),
    ("Nvidia Tesla K80", "NVIDIA_TESLA_K80"),
    ("Nvidia Tesla A100", "NVIDIA_TESLA_A100"), ("Nvidia A100 40GB", "NVIDIA_TESLA_A100"),
    ("Nvidia A100 80GB", "NVIDIA_A100_80GB"), ("Nvidia Tesla A100 80GB", "NVIDIA_A100_80GB"),
    ("Nvidia L4", "NVIDIA_L4"),
    ("Nvidia H100 80GB", "NVIDIA_H100_80GB"), ("Nvidia H100", "NVIDIA_H100_80GB"),
    ("Nvidia H100 Mega 80GB", "NVIDIA_H100_MEGA_80GB"), ("Nvidia H100 Mega", "NVIDIA_H100_MEGA_80GB"),
    ("Nvidia H200 141GB", "NVIDIA_H200_141GB"), ("Nvidia H200", "NVIDIA_H200_141GB"),
    ("Nvidia B200", "NVIDIA_B200"), ("Nvidia GB200", "NVIDIA_GB200"),
    ("Nvidia RTX PRO 6000", "NVIDIA_RTX_PRO_6000"),
), key=lambda pair: -len(pair[0])))
_FLEX = re.compile(r"\b(DWS|Flex[- ]?Start|Dynamic Workload Scheduler)\b", re.IGNORECASE)
_SPOT = re.compile(r"\b(Spot|Preemptible)\b", re.IGNORECASE)
_TRAINING = re.compile(r"\bTraining\b", re.IGNORECASE)
_PREDICTION = re.compile(r"\b(Prediction|Serving|Inference)\b", re.IGNORECASE)

Key = tuple[str, str, str]  # (accelerator, strategy, region)


@dataclass(frozen=True)
class CatalogPrices:
    """What the catalog says: price per GPU-hour per (accelerator, strategy, region), in
    ``currency``; ``skipped``: (sku id, why) for GPU training SKUs the rule could not use."""

    currency: str
    prices: dict[Key, float] = field(default_factory=dict)
    skipped: tuple[tuple[str, str], ...] = ()


def accelerator_of(description: str) -> str | None:
    text = description.lower()
    for name, accelerator in GPU_NAMES:
        if re.search(r"\b" + re.escape(name.lower()) + r"\b", text):
            return accelerator
    return None


def strategy_of(description: str, usage_type: str) -> str | None:
    if _FLEX.search(description):
        return "FLEX_START"
    if usage_type == "Preemptible" or (usage_type == "OnDemand" and _SPOT.search(description)):
        return "SPOT"
    if usage_type == "OnDemand":
        return "STANDARD"
    return None


def _hourly_price(sku: Any, currency: str) -> tuple[float | None, str]:
    infos = sorted(sku.pricing_info, key=lambda info: info.effective_time)
    if not infos:
        return None, "no pricingInfo"
    expression = infos[-1].pricing_expression
    if expression.usage_unit != "h":
        return None, f"usageUnit {expression.usage_unit!r} is not per hour ('h')"
    if not expression.tiered_rates:
        return None, "no tieredRates"
    first = min(expression.tiered_rates, key=lambda rate: rate.start_usage_amount)
    if first.unit_price.currency_code and first.unit_price.currency_code != currency:
        return None, f"priced in {first.unit_price.currency_code}, not {currency}"
    return first.unit_price.amount, ""


def map_skus(skus: Iterable[Any], currency: str = "USD") -> CatalogPrices:
    """The rule above over ``skus`` (:class:`airflow_gpu_sched.vertex.billing.Sku`)."""
    prices: dict[Key, float] = {}
    skipped: list[tuple[str, str]] = []
    for sku in skus:
        accelerator = accelerator_of(sku.description)
        if accelerator is None or not _TRAINING.search(sku.description) or _PREDICTION.search(sku.description):
            continue  # not a GPU training SKU: not ours to price
        strategy = strategy_of(sku.description, sku.category.usage_type)
        if strategy is None:
            skipped.append((sku.sku_id, f"usageType {sku.category.usage_type!r} is not OnDemand or Preemptible"))
            continue
        price, why = _hourly_price(sku, currency)
        if price is None:
            skipped.append((sku.sku_id, why))
            continue
        for region in sku.service_regions:
            key = (accelerator, strategy, region)
            if key in prices and prices[key] != price:
                skipped.append((sku.sku_id, f"another SKU prices {'/'.join(key)}; the higher price is kept"))
            prices[key] = max(price, prices.get(key, price))
    return CatalogPrices(currency, prices, tuple(skipped))


def merged_table(catalog: CatalogPrices, fallback: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's table (``fallback``) with the catalog's prices as ``by_region``. A currency
    clash keeps the catalog's prices out (mixing currencies would make every sum wrong)."""
    table: dict[str, Any] = {k: v for k, v in (fallback or {}).items() if k != "source"}
    if table.get("currency") not in (None, catalog.currency):
        log.warning("prices: your table is in %s, the catalog answered in %s; using your table only",
                    table["currency"], catalog.currency)
        return table
    by_region: dict[str, dict[str, dict[str, float]]] = {}
    for (accelerator, strategy, region), price in sorted(catalog.prices.items()):
        by_region.setdefault(region, {}).setdefault(accelerator, {})[strategy] = price
    return {**table, "currency": catalog.currency, "by_region": by_region, "source": CATALOG}


def price_of(table: Mapping[str, Any] | None, accelerator: str | None, strategy: str,
             region: str | None = None) -> float | None:
    """Per GPU-hour: the region's price (catalog), else the flat one (the user's), else None.
    A fallback to the user's table for a catalog table is logged with what was missing."""
    if not table or not accelerator:
        return None
    regional = ((table.get("by_region") or {}).get(region or "") or {}).get(accelerator) or {}
    if isinstance(regional, dict) and regional.get(strategy) is not None:
        return float(regional[strategy])
    flat = table.get(accelerator)
    price = flat.get(strategy) if isinstance(flat, dict) else None
    if table.get("source") == CATALOG:
        log.info("prices: the catalog has no %s %s price in %s; %s", accelerator, strategy, region,
                 f"using your table's {price}" if price is not None else "your table has none either")
    return None if price is None else float(price)


def catalog_spec(prices: Any) -> tuple[bool, Any]:
    """``prices=`` -> (from the catalog?, the user's table or Variable name to fall back on):
    ``"catalog"``, ``"catalog:<Variable>"``, or a table with ``"source": "catalog"``."""
    if isinstance(prices, str) and (prices == CATALOG or prices.startswith(CATALOG + ":")):
        return True, prices.partition(":")[2] or None
    if isinstance(prices, dict) and prices.get("source") == CATALOG:
        return True, prices
    return False, prices


class CatalogCache:
    """The catalog's prices per (endpoint, service, currency), kept ``ttl`` seconds in this
    process's memory (each worker process asks Google at most once a day by default). A failed
    fetch is not cached: the caller falls back to the user's table and the next call asks again."""

    def __init__(self, ttl: float = CATALOG_TTL_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str, str], tuple[float, CatalogPrices]] = {}

    def get(self, key: tuple[str, str, str], fetch: Callable[[], Iterable[Any]]) -> CatalogPrices:
        with self._lock:
            kept = self._kept.get(key)
            if kept and self.clock() - kept[0] < self.ttl:
                return kept[1]
        found = map_skus(fetch(), key[2])
        with self._lock:
            self._kept[key] = (self.clock(), found)
        for sku_id, why in found.skipped:
            log.info("prices: catalog SKU %s not used: %s", sku_id, why)
        return found

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


CACHE = CatalogCache()


def catalog_table(client: Any, fallback: Mapping[str, Any] | None, service: str | None = None,
                  cache: CatalogCache = CACHE) -> dict[str, Any] | None:
    """The merged table, from the catalog through ``client`` (a VertexClient: its connection's
    credentials and retries); the user's table alone, said in a warning, when the catalog fails."""
    from airflow_gpu_sched.vertex.billing import VERTEX_AI_SERVICE_ID
    from airflow_gpu_sched.vertex.client import VertexError

    service = service or VERTEX_AI_SERVICE_ID
    currency = str((fallback or {}).get("currency") or "USD")
    key = (str(getattr(client.api, "api_endpoint", None) or "google"), service, currency)
    try:
        found = cache.get(key, lambda: client.list_skus(service, currency_code=currency))
    except VertexError as exc:
        log.warning("prices: the billing catalog could not be read (%s); using your price table only", exc)
        return dict(fallback) if fallback else None
    return merged_table(found, fallback)


__all__ = ["CACHE", "CATALOG", "CATALOG_TTL_SECONDS", "GPU_NAMES", "CatalogCache", "CatalogPrices",
           "accelerator_of", "catalog_spec", "catalog_table", "map_skus", "merged_table", "price_of",
           "strategy_of"]
