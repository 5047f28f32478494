"""The Cloud Billing Catalog API (cloudbilling v1) as the price catalog: the ``services.skus.list``
answer's shapes, the Vertex AI service's id, and what a SKU is worth per usage unit.

What Google says (cloudbilling v1 discovery document, revision 20260901, in the
google-api-python-client wheel): ``GET https://cloudbilling.googleapis.com/v1/services/{service}/skus``
takes ``currencyCode`` (ISO 4217, default USD), ``startTime``/``endTime`` (google-datetime, one
calendar month, none in the future), ``pageSize`` (int32, default 5000) and ``pageToken``, and
answers ``ListSkusResponse`` ``{"skus": [Sku], "nextPageToken"}``. A Sku has ``name``, ``skuId``,
``description``, ``category`` {``serviceDisplayName``, ``resourceFamily``, ``resourceGroup``,
``usageType``}, ``serviceRegions``, ``pricingInfo`` [{``effectiveTime``, ``pricingExpression``
{``usageUnit``, ``baseUnit``, ``tieredRates`` [{``startUsageAmount``, ``unitPrice`` (Money:
``currencyCode``, ``units`` int64 as a string, ``nanos`` int32)}]}}], ``geoTaxonomy``,
``serviceProviderName``.

Which SKUs mean what is in :mod:`airflow_gpu_sched.orchestration.catalog_prices` (the rule) and
docs/fidelity.md ("Cloud Billing catalog").

May import: vertex; never airflow.
"""

from __future__ import annotations

from pydantic import Field

from airflow_gpu_sched.vertex.models import VertexModel

# The Vertex AI service in the billing catalog (observed: the id public code lists for "Vertex
# AI", e.g. the catalog URLs in several repositories; docs/fidelity.md)
VERTEX_AI_SERVICE_ID = "C7E2-9256-1C43"
DEFAULT_PAGE_SIZE = 5000  # the discovery document's "Defaults to 5000"
SKUS_LIST_PARAMETERS = ("currencyCode", "endTime", "pageSize", "pageToken", "startTime")


class Money(VertexModel):
    currency_code: str = ""
    units: str = "0"  # int64 travels as a JSON string
    nanos: int = 0

    @property
    def amount(self) -> float:
        return int(self.units or "0") + self.nanos / 1e9


class TierRate(VertexModel):
    start_usage_amount: float = 0.0
    unit_price: Money = Field(default_factory=Money)


class PricingExpression(VertexModel):
    usage_unit: str = ""
    usage_unit_description: str = ""
    base_unit: str = ""
    base_unit_conversion_factor: float | None = None
    display_quantity: float | None = None
    tiered_rates: list[TierRate] = Field(default_factory=list)


class PricingInfo(VertexModel):
    summary: str = ""
    effective_time: str = ""
    pricing_expression: PricingExpression = Field(default_factory=PricingExpression)
    currency_conversion_rate: float | None = None


class Category(VertexModel):
    service_display_name: str = ""
    resource_family: str = ""
    resource_group: str = ""
    usage_type: str = ""


class Sku(VertexModel):
    name: str = ""
    sku_id: str = ""
    description: str = ""
    category: Category = Field(default_factory=Category)
    service_regions: list[str] = Field(default_factory=list)
    pricing_info: list[PricingInfo] = Field(default_factory=list)
    service_provider_name: str = ""


class ListSkusResponse(VertexModel):
    skus: list[Sku] = Field(default_factory=list)
    next_page_token: str | None = None


__all__ = ["DEFAULT_PAGE_SIZE", "SKUS_LIST_PARAMETERS", "VERTEX_AI_SERVICE_ID", "Category", "ListSkusResponse",
           "Money", "PricingExpression", "PricingInfo", "Sku", "TierRate"]
