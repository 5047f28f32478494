"""The emulator holds (issue 37, part 4): what a client sends is bounded and refused with a 400
naming the field, never a 500 or a hang; every answer is strict JSON. At the wire, against the
session's emulator (tests/conftest.py) or a server of the test's own."""

from __future__ import annotations

import json

import pytest
import requests

from tests.conftest import LOCATION, PROJECT

JOBS = f"/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"


A100 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}


def _job(scheduling: dict | None = None, env: dict | None = None) -> dict:
    container = {"imageUri": "x", **({"env": [{"name": k, "value": v} for k, v in env.items()]} if env else {})}
    spec = {"workerPoolSpecs": [{"machineSpec": A100, "replicaCount": "1", "containerSpec": container}]}
    if scheduling:
        spec["scheduling"] = scheduling
    return {"displayName": "holds", "jobSpec": spec}


def strict(response: requests.Response):
    """The body as JSON, refusing NaN and Infinity (which json.loads accepts, and no JSON parser must)."""
    def refuse(name):
        raise AssertionError(f"{name} in an answer: not JSON ({response.request.method} {response.url[:100]})")
    return json.loads(response.text, parse_constant=refuse)


def _refused(response: requests.Response, *fragments: str) -> None:
    assert response.status_code == 400, response.text[:300]
    error = strict(response)["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    for fragment in fragments:
        assert fragment in error["message"], error["message"]


def _still_serves(emulator) -> None:
    emulator.advance(3600)  # every scheduled event of the jobs comes due and is applied
    listed = requests.get(emulator.url + JOBS, timeout=10)
    assert listed.status_code == 200, listed.text[:300]
    strict(listed)


# ---------------------------------------------------------------- durations (google.protobuf.Duration)

@pytest.mark.parametrize("field", ["timeout", "maxWaitDuration"])
@pytest.mark.parametrize("value", ["99999999999999s", "-99999999999999s", "315576000001s", "9" * 400 + "s"])
def test_a_duration_past_protobufs_range_is_a_400_naming_the_field(emulator, field, value):
    scheduling = {"strategy": "FLEX_START", field: value}
    response = requests.post(emulator.url + JOBS, json=_job(scheduling), timeout=10)
    _refused(response, f"scheduling.{'max_wait_duration' if field == 'maxWaitDuration' else field}",
             "out of range")
    _still_serves(emulator)


def test_the_largest_duration_protobuf_allows_is_accepted_and_never_overflows_the_clock(emulator):
    for scheduling in ({"strategy": "SPOT", "timeout": "315576000000s"},
                       {"strategy": "FLEX_START", "maxWaitDuration": "315576000000s"}):
        response = requests.post(emulator.url + JOBS, json=_job(scheduling), timeout=10)
        assert response.status_code == 200, response.text[:300]
        assert "315576000000s" in strict(response)["jobSpec"]["scheduling"].values()
    _still_serves(emulator)


# ---------------------------------------------------------------- the emulator's env knobs

@pytest.mark.parametrize("name, value", [
    ("EMULATOR_RUN_SECONDS", "inf"), ("EMULATOR_RUN_SECONDS", "1e20"), ("EMULATOR_RUN_SECONDS", "nan"),
    ("EMULATOR_RUN_SECONDS", "-5"), ("EMULATOR_RUN_SECONDS", "1e400"), ("EMULATOR_RUN_SECONDS", "soon"),
    ("EMULATOR_EXIT_CODE", "256"), ("EMULATOR_EXIT_CODE", "-1"), ("EMULATOR_EXIT_CODE", "9" * 5000),
    ("EMULATOR_EXIT_CODE", "１"),
])
def test_an_env_knob_out_of_bounds_is_refused_at_create_naming_it(emulator, name, value):
    response = requests.post(emulator.url + JOBS, json=_job(env={name: value}), timeout=10)
    _refused(response, name)
    assert emulator.stats()["jobsCreated"] == {}
    _still_serves(emulator)


def test_env_knobs_within_bounds_still_drive_the_job(emulator):
    body = _job(env={"EMULATOR_RUN_SECONDS": "315360000", "EMULATOR_EXIT_CODE": "255"})
    assert requests.post(emulator.url + JOBS, json=body, timeout=10).status_code == 200
    body = _job(env={"EMULATOR_RUN_SECONDS": "10", "EMULATOR_EXIT_CODE": "3"})
    name = requests.post(emulator.url + JOBS, json=body, timeout=10).json()["name"]
    emulator.advance(600)
    job = strict(requests.get(f"{emulator.url}/v1/{name}", timeout=10))
    assert job["state"] == "JOB_STATE_FAILED" and "non-zero status of 3" in job["error"]["message"]
    _still_serves(emulator)


# ---------------------------------------------------------------- JWT assertions on POST /token


def _assertion(claims: str) -> str:
    import base64

    encode = lambda text: base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")  # noqa: E731
    return f"{encode('{}')}.{encode(claims)}.c2ln"


def _token(emulator, assertion: str) -> requests.Response:
    return requests.post(f"{emulator.url}/token", timeout=30, headers={"Content-Type": "application/x-www-form-urlencoded"},
                         data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})


@pytest.mark.parametrize("claims", ['{"iss":' * 100_000 + "1" + "}" * 100_000, "[" * 100_000 + "]" * 100_000,
                                    '{"iss": 1e999}', '{"iss": NaN}', '{"iss": "a"', "\udcff"],
                         ids=["100000-deep-object", "100000-deep-list", "1e999", "NaN", "malformed", "not-utf8"])
def test_a_hostile_jwt_assertion_gets_an_oauth_400_and_the_records_stay_json(emulator, claims):
    response = _token(emulator, _assertion(claims.encode("utf-8", "surrogateescape").decode("latin-1")))
    assert response.status_code == 400, response.text[:300]
    assert strict(response)["error"] == "invalid_grant"
    records = requests.get(f"{emulator.url}/emulator/v1/auth", timeout=10)
    assert records.status_code == 200 and strict(records)["grants"] == []


@pytest.mark.parametrize("claims, issuer", [('{"iss": "sa@p.iam.gserviceaccount.com"}', "sa@p.iam.gserviceaccount.com"),
                                            ('{"iss": 1e300}', None), ('{"iss": {"a": [1, 2]}}', None),
                                            ('{"iss": "' + "x" * 5000 + '"}', None), ("[1]", None)])
def test_a_parsable_assertion_records_its_issuer_only_as_a_short_string(emulator, claims, issuer):
    response = _token(emulator, _assertion(claims))
    assert response.status_code == 200, response.text[:300]
    assert strict(requests.get(f"{emulator.url}/emulator/v1/auth", timeout=10))["grants"][-1]["issuer"] == issuer


# ---------------------------------------------------------------- heads, bodies, slow clients


@pytest.fixture
def quick_server():
    """A server of the test's own whose heads must arrive within 0.5 s (the CLI's: 10 s)."""
    from airflow_gpu_sched.emulator import EmulatorServer

    with EmulatorServer(head_timeout=0.5) as server:
        yield server


def _raw(server, data: bytes, *, then_read: bool = True) -> bytes:
    """Send ``data`` on a fresh connection, then read the answer until the server closes it
    (a 10 s socket timeout is the hang guard)."""
    import socket

    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while then_read:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _status_and_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


@pytest.mark.parametrize("head", [
    b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (64 << 20) + b"\r\n\r\n",
    b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Many: a\r\n" * 20_000 + b"\r\n",
    b"GET /v1/" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
], ids=["one-64MiB-header", "20000-headers", "100KB-url"])
def test_a_head_over_64_KiB_is_refused_with_a_431_the_client_reads(quick_server, head):
    status, error = _status_and_error(_raw(quick_server, head))
    assert status == 431 and error["code"] == 431 and "65536 bytes" in error["message"]
    assert requests.get(quick_server.url + JOBS, timeout=10).status_code == 200


def test_a_head_just_under_the_cap_is_served(quick_server):
    response = requests.get(quick_server.url + JOBS, headers={"X-Pad": "a" * 60_000}, timeout=10)
    assert response.status_code == 200, response.text[:200]


@pytest.mark.parametrize("partial", [b"", b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"],
                         ids=["nothing-sent", "half-a-head"])
def test_a_head_that_never_completes_gets_a_408_and_the_connection_closes(quick_server, partial):
    answer = _raw(quick_server, partial)  # returns once the server closed the connection
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert requests.get(quick_server.url + JOBS, timeout=10).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Connection": "close"}], ids=["keep-alive", "connection-close"])
def test_a_40_MiB_body_gets_a_413_the_client_reads(quick_server, headers):
    body = b"x" * (40 << 20)
    response = requests.post(quick_server.url + JOBS, data=body, timeout=30,
                             headers={"Content-Type": "application/json", **headers})
    assert response.status_code == 413, response.text[:200]
    error = strict(response)["error"]
    assert error["code"] == 413 and "Request Entity Too Large" in error["message"]
    answer = _raw(quick_server, b"POST " + JOBS.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                  b"application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert _status_and_error(answer)[0] == 413


def test_a_body_over_10_MiB_still_gets_googles_400(quick_server):
    response = requests.post(quick_server.url + JOBS, data=b"x" * (11 << 20), timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "Request payload size exceeds the limit" in response.text


# ---------------------------------------------------------------- Vertex's documented size limits


@pytest.mark.parametrize("count, status", [(64, 200), (65, 400), (10_000, 400)])
def test_a_resource_has_at_most_64_labels(emulator, count, status):
    body = {**_job(), "labels": {f"k{i}": "v" for i in range(count)}}
    response = requests.post(emulator.url + JOBS, json=body, timeout=10)
    assert response.status_code == status, response.text[:300]
    if status == 400:
        assert "at most 64 labels" in strict(response)["error"]["message"]
        assert len(response.content) < 2000  # one violation, not one per label


def test_the_operator_refuses_more_than_64_labels_before_any_job():
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
    from airflow_gpu_sched.operators import GpuTrainingOperator

    with pytest.raises(InvalidTrainingSpec, match="at most 64 labels"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan=[{"strategy": "SPOT"}],
                            image_uri="gcr.io/p/t:1", machine_type="a2-highgpu-1g",
                            accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
                            labels={f"k{i}": "v" for i in range(70)})


# ---------------------------------------------------------------- what the surface fuzz found


def test_a_tuning_job_whose_trials_could_not_run_is_refused_at_create(emulator):
    """Its trials are made later, in an event: a refusal there was a 500 on the next request."""
    body = {"displayName": "t", "maxTrialCount": 2, "parallelTrialCount": 1,
            "studySpec": {"algorithm": "GRID_SEARCH", "metrics": [{"metricId": "m", "goal": "MAXIMIZE"}],
                          "parameters": [{"parameterId": "p", "integerValueSpec": {"minValue": "1", "maxValue": "2"}}]},
            "trialJobSpec": _job(env={"EMULATOR_EXIT_CODE": "x"})["jobSpec"]}
    response = requests.post(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/hyperparameterTuningJobs",
                             json=body, timeout=10)
    _refused(response, "trialJobSpec.workerPoolSpecs[0].containerSpec.env.EMULATOR_EXIT_CODE")
    _still_serves(emulator)


@pytest.mark.parametrize("seconds", [10**30, -(10**30), 10**400], ids=["1e30", "-1e30", "1e400"])
def test_a_clock_advance_by_a_huge_integer_is_a_400(emulator, seconds):
    response = requests.post(f"{emulator.url}/emulator/v1/clock:advance", data=json.dumps({"seconds": seconds}),
                             headers={"Content-Type": "application/json"}, timeout=10)
    _refused(response, "seconds")
