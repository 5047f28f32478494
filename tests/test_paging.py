"""Paging as AIP-158 has it (google.aip.dev/158), at the wire: page sizes, tokens bound to the
other arguments, hostile tokens refused with Google's 400 (never a 500), and short or empty
pages that still carry a token (scenario ``variants.listPages: short``), through which every
lister of our client pages to the end. Module: airflow_gpu_sched.emulator.paging."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import requests

from airflow_gpu_sched.vertex.client import AsyncVertexClient, VertexClient
from tests.conftest import FAST, LOCATION, PROJECT, with_a100_pool
from tests.test_emulator_job_types import pipeline, tuning

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
SHORT = {**FAST, "variants": {"listPages": "short"}}


def _url(emulator, collection: str, parent: str = PARENT) -> str:
    return f"{emulator.url}/v1/{parent}/{collection}"


def _job_body(i: int, **labels: str) -> dict:
    return {"displayName": f"job-{i}", "labels": {"managed-by": "airflow-gpu-sched", **labels},
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                             "containerSpec": {"imageUri": "gcr.io/p/t:1"}}]}}


def _create_jobs(emulator, count: int, **labels: str) -> list[str]:
    names = []
    for i in range(count):
        response = requests.post(_url(emulator, "customJobs"), json=_job_body(i, **labels), timeout=10)
        response.raise_for_status()
        names.append(response.json()["name"])
    return names


def _get(emulator, collection: str, expect: int = 200, parent: str = PARENT, **params) -> dict:
    response = requests.get(_url(emulator, collection, parent), params=params, timeout=30)
    body = response.json()
    assert response.status_code == expect, body
    if expect != 200:
        assert set(body) == {"error"} and body["error"]["code"] == expect
        assert body["error"]["status"] == "INVALID_ARGUMENT"
    return body


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode()


# the tokens of a hostile client: none may give a 500
HOSTILE_TOKENS = [
    pytest.param("garbage!", id="not-base64"),
    pytest.param("bm90IGEgdG9rZW4=", id="base64-text"),
    pytest.param(_b64('{"p": 1e999, "f": ""}'), id="1e999"),  # the old token format, overflowing
    pytest.param(_b64('{"p": ' + "9" * 5000 + ', "f": ""}'), id="5000-digits"),
    pytest.param(_b64("[" * 5000 + "]" * 5000), id="deep-json"),
    pytest.param(_b64('{"p": 3, "f": ""}'), id="old-format-forged"),
    pytest.param("A" * 4000, id="4000-characters"),
    pytest.param("9" * 5000, id="digits"),
    pytest.param("²", id="superscript-digit"),
    pytest.param("%00", id="nul"),
]


@pytest.mark.parametrize("token", HOSTILE_TOKENS)
@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "trainingPipelines", "models",
                                        "persistentResources"])
def test_a_hostile_page_token_is_a_400_never_a_500(emulator, collection, token):
    body = _get(emulator, collection, 400, pageToken=token)
    assert "pageToken is not a token this list returned" in body["error"]["message"]
    _get(emulator, collection)  # the server is unharmed


@pytest.mark.parametrize("token", HOSTILE_TOKENS)
def test_a_hostile_page_token_of_the_other_lists_is_a_400(emulator, token):
    quotas = f"{emulator.url}/v1/projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com/quotaInfos"
    response = requests.get(quotas, params={"pageToken": token}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"
    logs = requests.post(f"{emulator.url}/v2/entries:list", timeout=30,
                         json={"resourceNames": [f"projects/{PROJECT}"], "pageToken": token})
    assert logs.status_code == 400 and "page_token is not a token" in logs.json()["error"]["message"]
    zone = f"{emulator.url}/compute/v1/projects/{PROJECT}/zones/us-central1-a/reservations"
    compute = requests.get(zone, params={"pageToken": token}, timeout=30)
    assert compute.status_code == 400, compute.text[:200]


@pytest.mark.parametrize("raw", ["-1", "abc", "1e999", "2147483648", "9" * 5000, "1.5"])
def test_a_page_size_that_is_negative_or_not_an_int32_is_refused(emulator, raw):
    for collection in ("customJobs", "persistentResources"):
        body = _get(emulator, collection, 400, pageSize=raw)
        assert "page" in body["error"]["message"].lower()


def test_a_page_size_over_the_maximum_is_coerced_and_zero_is_the_default(emulator):
    names = _create_jobs(emulator, 3)
    for size in ("2147483647", "1001", "0", ""):
        body = _get(emulator, "customJobs", pageSize=size)
        assert [j["name"] for j in body["customJobs"]] == names[::-1] and "nextPageToken" not in body


def test_a_token_is_bound_to_every_other_argument_but_the_page_size(emulator):
    _create_jobs(emulator, 5, team="ml")
    flt = 'labels.team="ml"'
    first = _get(emulator, "customJobs", pageSize=2, filter=flt)
    token = first["nextPageToken"]
    for changed in ({"filter": 'labels.team="ops"'}, {"filter": ""}, {"readMask": "name"}):
        body = _get(emulator, "customJobs", 400, pageSize=2, pageToken=token, **{"filter": flt, **changed})
        assert "issued for other arguments" in body["error"]["message"]
    _get(emulator, "customJobs", 400, parent=f"projects/{PROJECT}/locations/europe-west4", pageSize=2,
         pageToken=token, filter=flt)
    _get(emulator, "hyperparameterTuningJobs", 400, pageSize=2, pageToken=token, filter=flt)
    # "If the user changes the page_size in a request for subsequent pages, the service must honor it"
    rest = _get(emulator, "customJobs", pageSize=10, pageToken=token, filter=flt)
    assert len(rest["customJobs"]) == 3 and "nextPageToken" not in rest


def test_a_models_token_is_bound_to_its_order_by(emulator):
    emulator.reset(FAST)
    for i in range(3):
        requests.post(_url(emulator, "trainingPipelines"), json=pipeline(name=f"p{i}"), timeout=10).raise_for_status()
    emulator.advance(400)
    first = _get(emulator, "models", pageSize=1)
    assert first["nextPageToken"]
    _get(emulator, "models", 400, pageSize=1, pageToken=first["nextPageToken"], orderBy="create_time desc")
    assert _get(emulator, "models", pageSize=5, pageToken=first["nextPageToken"])["models"]


# --- short and empty pages that still carry a token (variants.listPages: short)


def _pages(emulator, collection: str, **params) -> list[dict]:
    pages, token = [], None
    while True:
        page = _get(emulator, collection, **params, **({"pageToken": token} if token else {}))
        pages.append(page)
        if not (token := page.get("nextPageToken")):
            return pages


def test_short_pages_come_empty_or_short_with_a_token_until_the_end(emulator):
    emulator.reset(SHORT)
    names = _create_jobs(emulator, 7, team="ml")
    _create_jobs(emulator, 6, team="ops")
    pages = _pages(emulator, "customJobs", pageSize=4, filter='labels.team="ml"')
    assert pages[0] == {"nextPageToken": pages[0]["nextPageToken"]}  # empty, with a token
    assert any(not p.get("customJobs") for p in pages[1:-1])  # the filter leaves some pages empty
    assert all(len(p.get("customJobs", [])) <= 2 for p in pages)
    assert [j["name"] for p in pages for j in p.get("customJobs", [])] == names[::-1]
    assert "nextPageToken" not in pages[-1]


def test_under_full_pages_nothing_changes(emulator):
    emulator.reset(FAST)
    names = _create_jobs(emulator, 5)
    pages = _pages(emulator, "customJobs", pageSize=2)
    assert [len(p["customJobs"]) for p in pages] == [2, 2, 1]
    assert [j["name"] for p in pages for j in p["customJobs"]] == names[::-1]


def _seed_every_collection(emulator) -> dict[str, set[str]]:
    emulator.reset({**with_a100_pool("pool-a"), "variants": {"listPages": "short"}})
    jobs = set(_create_jobs(emulator, 5))
    tunings = {requests.post(_url(emulator, "hyperparameterTuningJobs"), timeout=10,
                             json={**tuning(max_trials=1, parallel=1, name=f"t{i}"),
                                   "labels": {"managed-by": "airflow-gpu-sched"}}).json()["name"]
               for i in range(3)}
    pipes = {requests.post(_url(emulator, "trainingPipelines"), timeout=10,
                           json={**pipeline(name=f"p{i}"), "labels": {"managed-by": "airflow-gpu-sched"}}
                           ).json()["name"] for i in range(3)}
    emulator.advance(400)
    models = {m["name"] for p in _pages(emulator, "models", pageSize=100) for m in p.get("models", [])}
    assert len(models) == 3
    return {"jobs": jobs, "tunings": tunings, "pipes": pipes, "models": models,
            "resources": {f"{PARENT}/persistentResources/pool-a"}}


def test_every_sync_lister_pages_through_empty_pages_to_the_end(emulator):
    seeded = _seed_every_collection(emulator)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        first = client.list_custom_jobs_page(page_size=2)
        assert first.custom_jobs == [] and first.next_page_token  # the variant is on
        listed = [j.name for j in client.list_custom_jobs(page_size=2)]
        every = {j["name"] for p in _pages(emulator, "customJobs", pageSize=1000) for j in p.get("customJobs", [])}
        assert len(listed) == len(set(listed)) and set(listed) == every  # the trials' and pipelines' jobs too
        assert {j.name for j in client.list_custom_jobs(filter='labels.managed-by="airflow-gpu-sched"',
                                                        page_size=2)} >= seeded["jobs"]
        assert {t.name for t in client.list_hyperparameter_tuning_jobs(page_size=1)} == seeded["tunings"]
        assert {p.name for p in client.list_training_pipelines(page_size=1)} == seeded["pipes"]
        assert {m.name for m in client.list_models(page_size=1)} == seeded["models"]
        assert {r.name for r in client.list_persistent_resources(page_size=1)} == seeded["resources"]
        quotas = client.list_quota_infos()
        assert quotas and len({q.quota_id for q in quotas}) == len(quotas)


async def test_every_async_lister_pages_through_empty_pages_to_the_end(emulator):
    seeded = await asyncio.to_thread(_seed_every_collection, emulator)
    client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)
    assert {j.name async for j in client.list_custom_jobs(page_size=2)} >= seeded["jobs"]
    assert {t.name async for t in client.list_hyperparameter_tuning_jobs(page_size=1)} == seeded["tunings"]
    assert {p.name async for p in client.list_training_pipelines(page_size=1)} == seeded["pipes"]
    assert {m.name async for m in client.list_models(page_size=1)} == seeded["models"]
    assert {r.name async for r in client.list_persistent_resources(page_size=1)} == seeded["resources"]
    assert await client.list_quota_infos()


def test_jobs_list_of_the_platform_tool_pages_through_empty_pages(emulator):
    from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB, HYPERPARAMETER_TUNING_JOB, TRAINING_PIPELINE
    from airflow_gpu_sched.tools.platform import list_jobs

    seeded = _seed_every_collection(emulator)
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        rows = list_jobs(client, [CUSTOM_JOB, HYPERPARAMETER_TUNING_JOB, TRAINING_PIPELINE])
    names = {r.name for r in rows}
    assert seeded["jobs"] | seeded["tunings"] | seeded["pipes"] <= names


async def test_the_shared_poller_pages_through_empty_pages(vertex_conn):
    emulator = vertex_conn
    from airflow_gpu_sched.triggers import CustomJobTrigger

    emulator.reset(SHORT)
    names = await asyncio.to_thread(_create_jobs, emulator, 6)

    async def first(trigger):
        async for event in trigger.run():
            return event.payload

    events = await asyncio.wait_for(asyncio.gather(*(first(CustomJobTrigger(n, poll_interval=0.1)) for n in names)),
                                    120)
    assert [e["job"]["name"] for e in events] == names
    assert all(e["status"] == "succeeded" for e in events)
    assert emulator.stats()["requests"].get("customJobs.list", 0) >= 2  # the empty first page, then on


def test_the_failure_tail_reads_on_through_empty_log_pages(emulator):
    """Cloud Logging documents an empty page with a token as "keep searching"; under the short
    variant the emulator's entries:list answers one first, and the failure tail still gets its lines."""
    from airflow_gpu_sched.operators.job_logs import read_failure_tail
    from airflow_gpu_sched.vertex import cloud_logging
    from tests.test_job_logs import _ended_job

    emulator.reset({**SHORT, "speed": 1})
    name = _ended_job(emulator, exit_code=1)
    flt = cloud_logging.jobs_filter([cloud_logging.job_id_of(name)])
    first = requests.post(f"{emulator.url}/v2/entries:list", timeout=10,
                          json={"resourceNames": [f"projects/{PROJECT}"], "filter": flt}).json()
    assert set(first) == {"nextPageToken"}  # empty, with a token
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        tail = read_failure_tail(client, name, 4)
    assert tail is not None and "ERROR" in tail and tail.count("\n") == 4, tail
