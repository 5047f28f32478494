"""Prices from the Cloud Billing catalog: the emulator's ``services.skus.list`` (strict against the
discovery document, answers parsed by Google's own billing_v1 types), the client that pages it,
the pure SKU -> (accelerator, strategy, region) rule, the cache, and ``prices="catalog"`` on an
operator with the user's table as the fallback."""

from __future__ import annotations

import logging

import pytest
import requests

from airflow_gpu_sched.emulator.billing_api import catalog, sample
from airflow_gpu_sched.operators import GpuTrainingOperator
from airflow_gpu_sched.orchestration.catalog_prices import (
    CatalogCache,
    accelerator_of,
    catalog_spec,
    catalog_table,
    map_skus,
    price_of,
)
from airflow_gpu_sched.vertex.billing import VERTEX_AI_SERVICE_ID, Sku
from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient
from tests.conftest import FAST, LOCATION, PROJECT
from tests.google_types import format_violations, traffic_violations
from tests.test_operators import context

SKUS = f"/v1/services/{VERTEX_AI_SERVICE_ID}/skus"
FAST_RETRY = RetryPolicy(initial=0.01, maximum=0.02, deadline=1.0)
BILLING_VARIANTS = ["dws", "no_dws", "spot_in_description"]


def _client(emulator) -> VertexClient:
    return VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url, retry=FAST_RETRY)


def _skus(variant: str = "dws") -> list[Sku]:
    return [Sku.model_validate(s) for s in catalog(variant)]


# ------------------------------------------------------------------ the rule (pure)

def test_the_sample_is_labelled_sample():
    assert sample()["_SAMPLE"].startswith("SAMPLE DATA, NOT GOOGLE'S PRICES")


@pytest.mark.parametrize("description, accelerator", [
    ("Training Nvidia Tesla A100 GPU running in Iowa", "NVIDIA_TESLA_A100"),
    ("Training Nvidia A100 80GB GPU running in Iowa", "NVIDIA_A100_80GB"),  # the longer name wins
    ("Training Nvidia H100 Mega 80GB GPU running in Iowa", "NVIDIA_H100_MEGA_80GB"),
    ("Training Nvidia L4 GPU running in Iowa", "NVIDIA_L4"),
    ("Training N1 Predefined Instance Core running in Iowa", None),
])
def test_the_accelerator_is_read_from_the_description(description, accelerator):
    assert accelerator_of(description) == accelerator


@pytest.mark.parametrize("variant", BILLING_VARIANTS)
def test_the_rule_maps_training_gpu_skus_by_tier_and_region(variant):
    found = map_skus(_skus(variant))
    prices = found.prices
    assert found.currency == "USD"
    assert prices[("NVIDIA_TESLA_T4", "STANDARD", "us-central1")] == pytest.approx(0.40)
    assert prices[("NVIDIA_TESLA_T4", "SPOT", "us-central1")] == pytest.approx(0.14)
    assert prices[("NVIDIA_L4", "SPOT", "us-east4")] == pytest.approx(round(0.22 * 1.127, 4))
    if variant == "no_dws":
        assert not any(strategy == "FLEX_START" for _, strategy, _ in prices)
    else:
        assert prices[("NVIDIA_TESLA_T4", "FLEX_START", "us-central1")] == pytest.approx(0.20)
    # prediction, commitments and CPU SKUs are not training GPU prices; the gap stays a gap
    assert ("NVIDIA_H100_80GB", "STANDARD", "asia-southeast1") not in prices
    strategies = ["STANDARD", "SPOT"] + ([] if variant == "no_dws" else ["FLEX_START"])
    assert sorted(prices) == sorted((a, s, r) for a, s, r in prices if s in strategies)
    assert len(prices) == 19 * len(strategies)  # 5 GPUs x 4 regions, one gap; 0.40 above: no prediction price
    assert any("Commit1Yr" in why for _, why in found.skipped)


def test_a_sku_not_per_hour_or_in_another_currency_is_skipped_and_said_why():
    raw = sample()["skus"][0]
    per_month = {**raw, "skuId": "A", "pricingInfo": [{**raw["pricingInfo"][0], "pricingExpression": {
        **raw["pricingInfo"][0]["pricingExpression"], "usageUnit": "mo"}}]}
    found = map_skus([Sku.model_validate(per_month)])
    assert found.prices == {} and found.skipped == (("A", "usageUnit 'mo' is not per hour ('h')"),)
    found = map_skus([Sku.model_validate(raw)], currency="EUR")
    assert found.prices == {} and "priced in USD, not EUR" in found.skipped[0][1]


def test_two_skus_for_one_price_keep_the_higher():
    raw = sample()["skus"][0]
    dearer = {**raw, "skuId": "B", "pricingInfo": [{**raw["pricingInfo"][0], "pricingExpression": {
        **raw["pricingInfo"][0]["pricingExpression"],
        "tieredRates": [{"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "9", "nanos": 0}}]}}]}
    found = map_skus([Sku.model_validate(raw), Sku.model_validate(dearer)])
    assert list(found.prices.values()) == [9.0] and found.skipped[0][0] == "B"


def test_price_of_prefers_the_region_then_the_users_table_and_says_so(caplog):
    table = {"currency": "USD", "source": "catalog", "NVIDIA_L4": {"FLEX_START": 0.5},
             "by_region": {"us-central1": {"NVIDIA_L4": {"SPOT": 0.22}}}}
    assert price_of(table, "NVIDIA_L4", "SPOT", "us-central1") == 0.22
    with caplog.at_level(logging.INFO, "airflow_gpu_sched.prices"):
        assert price_of(table, "NVIDIA_L4", "FLEX_START", "us-central1") == 0.5
        assert price_of(table, "NVIDIA_L4", "STANDARD", "us-central1") is None
    assert "catalog has no NVIDIA_L4 FLEX_START price in us-central1; using your table's 0.5" in caplog.text
    assert "your table has none either" in caplog.text


@pytest.mark.parametrize("prices, expected", [
    ("catalog", (True, None)), ("catalog:gpu_prices", (True, "gpu_prices")),
    ({"source": "catalog", "currency": "USD"}, (True, {"source": "catalog", "currency": "USD"})),
    ("gpu_prices", (False, "gpu_prices")), (None, (False, None)),
])
def test_catalog_spec(prices, expected):
    assert catalog_spec(prices) == expected


# ------------------------------------------------------------------ the emulator's route, at the wire

def test_the_client_pages_the_catalog_and_googles_types_parse_every_answer(emulator):
    emulator.start_traffic()
    with _client(emulator) as client:
        first = client.list_skus_page(VERTEX_AI_SERVICE_ID, page_size=40)
        second = client.list_skus_page(VERTEX_AI_SERVICE_ID, page_size=40, page_token=first.next_page_token)
        every = client.list_skus(VERTEX_AI_SERVICE_ID)
        euros = client.list_skus_page(VERTEX_AI_SERVICE_ID, page_size=1, currency_code="EUR")
    assert len(first.skus) == 40 and first.next_page_token and second.skus[0].sku_id != first.skus[0].sku_id
    assert [s.sku_id for s in every] == [s["skuId"] for s in sample()["skus"]]
    assert euros.skus[0].pricing_info[0].pricing_expression.tiered_rates[0].unit_price.currency_code == "EUR"
    exchanges = emulator.traffic()
    assert {e["rpc"] for e in exchanges} == {"skus.list"} and len(exchanges) == 4
    violations = traffic_violations(exchanges)
    assert violations == [], format_violations(violations)
    assert emulator.stats()["requests"]["skus.list"] == 4


@pytest.mark.parametrize("params, status, words", [
    ({"filter": "x"}, 400, 'Unknown name "filter": Cannot bind query parameter'),
    ({"pageSize": "-1"}, 400, "must not be negative"),
    ({"pageSize": "lots"}, 400, "Invalid value at 'page_size' (TYPE_INT32)"),
    ({"pageToken": "forged"}, 400, "page_token is not a token this list returned"),
    ({"currencyCode": "XXX"}, 400, "currency_code 'XXX' is not supported"),
    ({"startTime": "2020-01-01T00:00:00Z"}, 400, "must be given together"),
    ({"startTime": "2020-01-01T00:00:00Z", "endTime": "2020-02-02T00:00:00Z"}, 400, "single calendar month"),
    ({"startTime": "2999-01-01T00:00:00Z", "endTime": "2999-01-02T00:00:00Z"}, 400, "must not be in the future"),
    ({"startTime": "yesterday", "endTime": "today"}, 400, "Illegal timestamp format"),
])
def test_the_catalog_refuses_what_the_discovery_document_does_not_allow(emulator, params, status, words):
    answer = requests.get(emulator.url + SKUS, params=params, timeout=5)
    assert answer.status_code == status and words in answer.json()["error"]["message"]
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_token_is_bound_to_the_currency_and_an_unknown_service_is_not_found(emulator):
    token = requests.get(emulator.url + SKUS, params={"pageSize": 5}, timeout=5).json()["nextPageToken"]
    other = requests.get(emulator.url + SKUS, params={"pageToken": token, "currencyCode": "EUR"}, timeout=5)
    assert other.status_code == 400
    missing = requests.get(emulator.url + "/v1/services/6F81-5844-456A/skus", timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    in_range = requests.get(emulator.url + SKUS, params={"startTime": "2020-01-01T00:00:00Z",
                                                        "endTime": "2020-01-31T00:00:00Z", "pageSize": 1}, timeout=5)
    assert in_range.status_code == 200 and len(in_range.json()["skus"]) == 1


# ------------------------------------------------------------------ the cache and the fallback

@pytest.mark.parametrize("variant", BILLING_VARIANTS)
def test_catalog_prices_with_the_users_table_for_what_it_lacks_under_each_variant(emulator, variant, caplog):
    emulator.reset({"seed": 7, "variants": {"billingSkus": variant}})
    fallback = {"currency": "USD", "NVIDIA_TESLA_T4": {"FLEX_START": 0.33, "PERSISTENT_RESOURCE": 0.0}}
    with _client(emulator) as client, caplog.at_level(logging.INFO, "airflow_gpu_sched.prices"):
        table = catalog_table(client, fallback, cache=CatalogCache())
        spot = price_of(table, "NVIDIA_TESLA_T4", "SPOT", "us-central1")
        flex = price_of(table, "NVIDIA_TESLA_T4", "FLEX_START", "us-central1")
        kept = price_of(table, "NVIDIA_TESLA_T4", "PERSISTENT_RESOURCE", "us-central1")
    assert spot == pytest.approx(0.14) and kept == 0.0
    assert flex == pytest.approx(0.33 if variant == "no_dws" else 0.20)
    assert ("using your table's 0.33" in caplog.text) == (variant == "no_dws")


def test_the_catalog_is_asked_once_a_day_per_process_and_a_failure_falls_back(emulator, caplog):
    now = [0.0]
    cache = CatalogCache(ttl=86_400, clock=lambda: now[0])
    with _client(emulator) as client:
        catalog_table(client, None, cache=cache)
        catalog_table(client, None, cache=cache)
        assert emulator.stats()["requests"]["skus.list"] == 1
        now[0] = 86_401
        catalog_table(client, None, cache=cache)
        assert emulator.stats()["requests"]["skus.list"] == 2
        emulator.reset({"seed": 7, "faults": {"errorRate": 1.0, "statusCodes": [503]}})
        cache.clear()
        with caplog.at_level(logging.WARNING, "airflow_gpu_sched.prices"):
            table = catalog_table(client, {"currency": "USD", "NVIDIA_L4": {"SPOT": 0.5}}, cache=cache)
    assert table == {"currency": "USD", "NVIDIA_L4": {"SPOT": 0.5}}
    assert "billing catalog could not be read" in caplog.text and "using your price table only" in caplog.text


def test_an_operator_with_prices_catalog_costs_its_run_from_the_catalog(vertex_conn, monkeypatch):
    import json

    from airflow_gpu_sched.orchestration.catalog_prices import CACHE

    CACHE.clear()  # the process cache would carry another test's emulator's answer
    vertex_conn.reset(FAST)
    monkeypatch.setenv("AIRFLOW_VAR_GPU_PRICES", json.dumps({"currency": "USD", "NVIDIA_TESLA_A100": {"SPOT": 99}}))
    op = GpuTrainingOperator(task_id="t", deferrable=False, prices="catalog:gpu_prices",
                             plan=[{"strategy": "STANDARD"}], env={"EMULATOR_RUN_SECONDS": "360"},
                             project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1", poll_interval=0.02,
                             base_output_dir="gs://bucket/catalog", machine_type="a2-highgpu-1g",
                             accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
    result = op.execute(context())
    assert result["currency"] == "USD"
    assert result["cost"] == pytest.approx(0.1 * 3.37, abs=0.005)  # 6 GPU-minutes at the sample's on-demand A100
    CACHE.clear()
