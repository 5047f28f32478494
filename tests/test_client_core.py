"""The client's non-I/O core: URLs, bodies, error mapping, retry decisions, settings.
No HTTP here: wire tests against the emulator live elsewhere."""

from __future__ import annotations

import asyncio
import json
import pickle
import random
import threading
import time

import httpx
import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from airflow_gpu_sched.vertex.client import (
    AmbiguousCreateError,
    ApiRequestInfo,
    ConnectionSettings,
    GiveUp,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    Retry,
    RetryPolicy,
    Safety,
    ServerError,
    TokenSource,
    UnavailableError,
    VertexApi,
    VertexApiError,
    VertexClient,
    VertexTransportError,
    error_from_response,
    error_from_status,
    is_loopback_http,
    next_step,
)
from airflow_gpu_sched.vertex.client import aio, sync
from airflow_gpu_sched.vertex.client.responses import parse_retry_after
from airflow_gpu_sched.vertex.models import CustomJob, Status
from airflow_gpu_sched.vertex.rules import SpecError

PARENT = "projects/p/locations/us-east4"
JOB_NAME = f"{PARENT}/customJobs/123"
INFO = ApiRequestInfo("POST", "https://us-east4-aiplatform.googleapis.com/v1/x", "customJobs.create")
QUOTA_BODY = {
    "error": {
        "code": 429,
        "message": "The following quota metrics exceed quota limits: "
                   "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"}],
    }
}


def valid_job(**overrides) -> dict:
    job = {
        "displayName": "train",
        "labels": {"run": "r1"},
        "jobSpec": {"workerPoolSpecs": [{
            "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/train:1"},
            "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                            "acceleratorCount": 1},
            "replicaCount": "1",
        }]},
    }
    job.update(overrides)
    return job


class FixedRng:
    """``uniform`` at a fixed fraction of its range: 1.0 = the cap, 0.0 = no wait."""

    def __init__(self, fraction: float):
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.fraction


def api_error(status: int, rpc: str | None = None, retry_after: str | None = None) -> VertexApiError:
    body = {"error": {"code": status, "message": "m", "status": rpc}} if rpc else b""
    return error_from_response(status, body, INFO, retry_after)


def transport(kind: str) -> VertexTransportError:
    return VertexTransportError(kind, INFO, "boom")


API = VertexApi()
CREATE = API.create_custom_job(PARENT, valid_job())
GET = API.get_custom_job(JOB_NAME)


# --------------------------------------------------------------------------- URLs and calls


def test_url_uses_the_regional_host_of_the_resource_location():
    assert API.url(GET) == f"https://us-east4-aiplatform.googleapis.com/v1/{JOB_NAME}"
    assert GET.location == "us-east4"
    op = API.get_operation("projects/p/locations/europe-west4/customJobs/1/operations/9")
    assert API.url(op).startswith("https://europe-west4-aiplatform.googleapis.com/v1/projects/")


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8123", "http://127.0.0.1:8123/",
                                      "http://127.0.0.1:8123/v1", "http://127.0.0.1:8123/v1/"])
def test_api_endpoint_override_gives_one_v1_root(endpoint):
    assert VertexApi(endpoint).url(GET) == f"http://127.0.0.1:8123/v1/{JOB_NAME}"


def test_api_endpoint_with_userinfo_is_refused():
    with pytest.raises(ValueError, match="credentials"):
        VertexApi("https://user:secret@example.com")


def test_a_name_that_is_not_a_resource_name_is_refused():
    with pytest.raises(ValueError, match="projects/P/locations/L"):
        API.get_custom_job("customJobs/123")


def test_list_encodes_the_filter_and_drops_unset_params():
    call = API.list_custom_jobs(PARENT, filter='labels.run="r1" AND state!="JOB_STATE_FAILED"', page_size=50)
    url = API.url(call)
    assert url.startswith(f"https://us-east4-aiplatform.googleapis.com/v1/{PARENT}/customJobs?")
    assert "filter=labels.run%3D%22r1%22%20AND%20state%21%3D%22JOB_STATE_FAILED%22" in url
    assert "pageSize=50" in url and "pageToken" not in url and "readMask" not in url


def test_cancel_delete_and_persistent_resource_calls():
    cancel = API.cancel_custom_job(JOB_NAME)
    assert (cancel.method, cancel.path, cancel.body, cancel.safety) == ("POST", f"{JOB_NAME}:cancel", {},
                                                                        Safety.IDEMPOTENT)
    assert API.delete_custom_job(JOB_NAME).method == "DELETE"
    resource = {"resourcePools": [{"id": "a100", "replicaCount": 2, "usedReplicaCount": 1,
                                   "machineSpec": {"machineType": "a2-highgpu-1g",
                                                   "acceleratorType": "NVIDIA_TESLA_A100",
                                                   "acceleratorCount": 1}}],
                "state": "RUNNING"}
    create = API.create_persistent_resource(PARENT, resource, "pool-1")
    assert API.url(create).endswith(f"{PARENT}/persistentResources?persistentResourceId=pool-1")
    assert create.safety is Safety.IDEMPOTENT  # client-chosen id: a repeat gets 409, not a twin
    assert "state" not in create.body and "usedReplicaCount" not in create.body["resourcePools"][0]


def test_create_persistent_resource_checks_the_id():
    with pytest.raises(SpecError) as caught:
        API.create_persistent_resource(PARENT, {"resourcePools": []}, "Bad_Id")
    assert {v.path for v in caught.value.violations} == {"persistentResourceId", "resourcePools"}


def test_create_sends_the_job_without_output_only_fields():
    job = valid_job(name=f"{PARENT}/customJobs/9", state="JOB_STATE_RUNNING", createTime="2026-01-01T00:00:00Z",
                    error={"code": 1})
    call = API.create_custom_job(("p", "us-east4"), CustomJob.model_validate(job))
    assert (call.method, call.path, call.safety) == ("POST", f"{PARENT}/customJobs", Safety.CREATE)
    assert set(call.body) == {"displayName", "labels", "jobSpec"}
    assert call.body["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"  # int64 as a string


def test_create_rejects_a_bad_spec_before_any_call_is_built():
    bad = valid_job()
    bad["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_L4"
    with pytest.raises(SpecError) as caught:
        API.create_custom_job(PARENT, bad)
    assert [v.path for v in caught.value.violations] == ["jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"]


def test_client_create_rejects_a_bad_spec_without_sending():
    class NoSession(requests.Session):
        def request(self, *args, **kwargs):
            raise AssertionError("a bad spec reached the wire")

    client = VertexClient("us-east4", project="p", api_endpoint="http://127.0.0.1:9", session=NoSession())
    with pytest.raises(SpecError, match="displayName"):
        client.create_custom_job(valid_job(displayName=""))


# --------------------------------------------------------------------------- error mapping


def test_a_real_shaped_429_maps_to_quota_exceeded():
    error = error_from_response(429, json.dumps(QUOTA_BODY).encode(), INFO, "7")
    assert isinstance(error, QuotaExceededError)
    assert (error.status_code, error.rpc_status, error.retry_after) == (429, "RESOURCE_EXHAUSTED", 7.0)
    assert error.details[0]["reason"] == "RATE_LIMIT_EXCEEDED"
    assert str(error) == (
        "429 RESOURCE_EXHAUSTED on customJobs.create POST https://us-east4-aiplatform.googleapis.com/v1/x: "
        "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus")


def test_a_400_with_bad_request_details_lists_field_violations():
    body = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "List of found errors",
                      "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [
                          {"field": "job_spec.worker_pool_specs[0].machine_spec.accelerator_type",
                           "description": "Both `accelerator_type` and `accelerator_count` should be specified"}]}]}}
    error = error_from_response(400, body, INFO)
    assert isinstance(error, InvalidArgumentError)
    assert error.field_violations == [("job_spec.worker_pool_specs[0].machine_spec.accelerator_type",
                                       "Both `accelerator_type` and `accelerator_count` should be specified")]


def test_a_non_json_502_maps_to_server_error_with_the_text():
    error = error_from_response(502, b"<html>\n  <title>502 Bad Gateway</title></html>", INFO)
    assert type(error) is ServerError and error.rpc_status is None
    assert "502 BAD_GATEWAY on customJobs.create" in str(error)
    assert "<title>502 Bad Gateway</title>" in error.message


@pytest.mark.parametrize(("status", "cls"), [(401, PermissionDeniedError), (403, PermissionDeniedError),
                                             (404, NotFoundError), (503, UnavailableError), (504, ServerError)])
def test_status_codes_map_to_the_tree(status, cls):
    assert type(error_from_response(status, b"", INFO)) is cls


def test_retry_info_detail_is_read_when_no_header():
    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "slow down",
                      "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12.5s"}]}}
    assert error_from_response(429, body, INFO).retry_after == 12.5


def test_retry_after_as_http_date():
    from datetime import datetime, timezone
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("soon") is None


def test_operation_status_maps_by_rpc_code():
    error = error_from_status(Status(code=8, message="Resources are insufficient in region: us-central1"))
    assert isinstance(error, QuotaExceededError) and error.rpc_status == "RESOURCE_EXHAUSTED"


def test_errors_pickle():
    error = error_from_response(429, QUOTA_BODY, INFO, "3")
    again = pickle.loads(pickle.dumps(AmbiguousCreateError(error)))
    assert str(again) == str(AmbiguousCreateError(error)) and again.cause.retry_after == 3.0


# --------------------------------------------------------------------------- retry classifier


POLICY = RetryPolicy(initial=1.0, maximum=30.0, multiplier=2.0, deadline=120.0)


def test_create_and_503_is_ambiguous():
    step = next_step(CREATE, api_error(503, "UNAVAILABLE"), 0, 0.0, POLICY, FixedRng(0.5))
    assert isinstance(step, GiveUp) and isinstance(step.error, AmbiguousCreateError)
    assert isinstance(step.error.cause, UnavailableError) and step.error.request == INFO


@pytest.mark.parametrize("kind", ["timeout", "protocol"])
def test_create_and_a_sent_request_failing_is_ambiguous(kind):
    step = next_step(CREATE, transport(kind), 0, 0.0, POLICY, FixedRng(0.5))
    assert isinstance(step, GiveUp) and isinstance(step.error, AmbiguousCreateError)


def test_create_retries_a_429_and_a_refused_connection():
    assert next_step(CREATE, api_error(429, "RESOURCE_EXHAUSTED"), 0, 0.0, POLICY, FixedRng(0.5)) == Retry(0.5)
    assert next_step(CREATE, transport("connect"), 1, 0.0, POLICY, FixedRng(0.5)) == Retry(1.0)


def test_create_and_400_gives_up_with_the_error_itself():
    error = api_error(400, "INVALID_ARGUMENT")
    assert next_step(CREATE, error, 0, 0.0, POLICY, FixedRng(0.5)) == GiveUp(error)


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_get_retries_transient_statuses(status):
    assert isinstance(next_step(GET, api_error(status), 0, 0.0, POLICY, FixedRng(1.0)), Retry)


@pytest.mark.parametrize("kind", ["connect", "timeout", "protocol"])
def test_get_retries_every_transport_failure(kind):
    assert isinstance(next_step(GET, transport(kind), 0, 0.0, POLICY, FixedRng(1.0)), Retry)


@pytest.mark.parametrize("status", [400, 403, 404, 409, 501])
def test_get_gives_up_on_permanent_statuses(status):
    error = api_error(status)
    assert next_step(GET, error, 0, 0.0, POLICY, FixedRng(0.0)) == GiveUp(error)


def test_the_deadline_is_never_slept_past_and_the_last_try_lands_on_it():
    error = api_error(503)
    assert next_step(GET, error, 3, 112.0, POLICY, FixedRng(1.0)) == Retry(8.0)  # ends at 120: allowed
    assert next_step(GET, error, 3, 112.5, POLICY, FixedRng(1.0)) == Retry(7.5)  # clipped to the deadline
    assert next_step(GET, error, 3, 120.0, POLICY, FixedRng(1.0)) == GiveUp(error)


def test_retry_after_is_honoured_and_still_bounded_by_the_deadline():
    error = api_error(429, "RESOURCE_EXHAUSTED", retry_after="45")
    assert next_step(GET, error, 0, 0.0, POLICY, FixedRng(1.0)) == Retry(45.0)  # above the 1 s jitter cap
    assert next_step(GET, error, 0, 80.0, POLICY, FixedRng(1.0)) == GiveUp(error)


@given(attempt=st.integers(min_value=0, max_value=10_000), seed=st.integers(0, 2**32))
def test_backoff_is_within_zero_and_the_cap(attempt, seed):
    delay = POLICY.backoff(attempt, random.Random(seed))
    assert 0.0 <= delay <= min(POLICY.maximum, POLICY.initial * 2.0 ** min(attempt, 64))


def test_backoff_cap_grows_then_saturates():
    assert [POLICY.cap(a) for a in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


# --------------------------------------------------------------------------- transport error kinds


def test_requests_failures_map_to_kinds():
    refused = requests.ConnectionError(MaxRetryError(None, "/v1/x", NewConnectionError(None, "refused")))
    reset = requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104)))
    assert sync.transport_error(refused, INFO).kind == "connect"
    assert sync.transport_error(requests.ConnectTimeout(), INFO).kind == "connect"
    assert sync.transport_error(requests.ReadTimeout(), INFO).kind == "timeout"
    assert sync.transport_error(reset, INFO).kind == "protocol"


def test_httpx_failures_map_to_kinds():
    assert aio.transport_error(httpx.ConnectError("refused"), INFO).kind == "connect"
    assert aio.transport_error(httpx.ConnectTimeout("slow"), INFO).kind == "connect"
    assert aio.transport_error(httpx.ReadTimeout("slow"), INFO).kind == "timeout"
    assert aio.transport_error(httpx.PoolTimeout("full"), INFO).kind == "timeout"
    assert aio.transport_error(httpx.RemoteProtocolError("bad"), INFO).kind == "protocol"


# --------------------------------------------------------------------------- settings and tokens

FAKE_KEY = "-----BEGIN PRIVATE KEY-----\nNOT-A-REAL-KEY\n-----END PRIVATE KEY-----\n"


def test_settings_from_extras_with_old_prefixes_and_a_json_keyfile():
    keyfile = {"type": "service_account", "project_id": "key-project", "private_key": FAKE_KEY,
               "client_email": "sa@key-project.iam.gserviceaccount.com"}
    settings = ConnectionSettings.from_extras({
        "extra__google_cloud_platform__keyfile_dict": json.dumps(keyfile),
        "extra__google_cloud_platform__scope": "https://a/one, https://a/two",
        "extra__google_cloud_platform__project": "",  # the UI stores empty fields as ""
        "api_endpoint": "http://127.0.0.1:8123",
    })
    assert settings.keyfile_dict == keyfile
    assert settings.scopes == ("https://a/one", "https://a/two")
    assert settings.project is None and settings.project_id == "key-project"
    assert settings.api_endpoint == "http://127.0.0.1:8123"
    assert "NOT-A-REAL-KEY" not in repr(settings) and "PRIVATE KEY" not in str(settings)


def test_settings_defaults_and_new_style_keys():
    settings = ConnectionSettings.from_extras({"project": "p", "key_path": "/k.json", "scopes": ["s1"]})
    assert (settings.project, settings.key_path, settings.scopes) == ("p", "/k.json", ("s1",))
    assert ConnectionSettings.from_extras({}).scopes == ("https://www.googleapis.com/auth/cloud-platform",)


def test_a_malformed_keyfile_is_refused_without_echoing_it():
    with pytest.raises(ValueError) as caught:
        ConnectionSettings.from_extras({"keyfile_dict": '{"private_key": "SECRET-MATERIAL", '})
    assert "SECRET-MATERIAL" not in str(caught.value)


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8123", "http://localhost:8123/v1", "http://[::1]:80"])
def test_no_credentials_for_a_loopback_emulator(endpoint):
    assert is_loopback_http(endpoint)
    assert ConnectionSettings(api_endpoint=endpoint, keyfile_dict={"private_key": FAKE_KEY}).credentials() is None


def test_no_token_over_plain_http_to_a_remote_host():
    assert not is_loopback_http("http://example.com") and not is_loopback_http("https://127.0.0.1")
    with pytest.raises(ValueError, match="unencrypted"):
        ConnectionSettings(api_endpoint="http://example.com").credentials()
    with pytest.raises(ValueError, match="unencrypted"):
        VertexClient("us-central1", project="p", api_endpoint="http://example.com")


class FakeCredentials:
    """google-auth's Credentials surface, counting refreshes; no network."""

    def __init__(self, delay: float = 0.0):
        self.token, self.refreshes, self.delay = None, 0, delay
        self.lock = threading.Lock()

    @property
    def valid(self) -> bool:
        return self.token is not None

    def refresh(self, request) -> None:
        time.sleep(self.delay)
        with self.lock:
            self.refreshes += 1
            self.token = f"tok-{self.refreshes}"

    def apply(self, headers: dict) -> None:
        headers["authorization"] = f"Bearer {self.token}"


def test_token_source_headers():
    assert TokenSource(None).headers() == {}
    credentials = FakeCredentials()
    source = TokenSource(credentials)
    assert source.headers() == {"authorization": "Bearer tok-1"}
    assert source.headers() == {"authorization": "Bearer tok-1"} and credentials.refreshes == 1
    assert "tok-1" not in repr(source)


def test_concurrent_async_callers_refresh_once_off_the_loop():
    credentials = FakeCredentials(delay=0.05)
    source = TokenSource(credentials)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(5):
                await asyncio.sleep(0.005)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(source.aheaders() for _ in range(20)))
        ticks_when_done = ticks  # 5 only if the loop kept running during the 50 ms refresh
        await tick_task
        return results, ticks_when_done

    results, ticks_when_done = asyncio.run(main())
    assert credentials.refreshes == 1 and ticks_when_done == 5
    assert all(r == {"authorization": "Bearer tok-1"} for r in results)


def test_a_fresh_token_is_registered_with_airflows_masker(monkeypatch):
    import airflow.sdk.log

    masked = []
    monkeypatch.setattr(airflow.sdk.log, "mask_secret", lambda secret, name=None: masked.append(secret))
    TokenSource(FakeCredentials()).headers()
    assert masked == ["tok-1"]
