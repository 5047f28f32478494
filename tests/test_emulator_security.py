"""The emulator as a hardened local server (docs/security.md, "The emulator"): what a web page,
a rebound DNS name or a hostile client can send it, and what it refuses, at the wire."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import requests

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.emulator.limits import MAX_BODY_BYTES, MAX_JSON_DEPTH
from tests.conftest import LOCATION, PROJECT

JSON = {"Content-Type": "application/json"}
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"


def job() -> dict:
    return {"displayName": "sec", "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "local", "command": ["true"]}}]}}


def assert_google_error(response: requests.Response, code: int, *words: str) -> dict:
    assert response.status_code == code, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == code and isinstance(error["status"], str) and error["message"]
    for word in words:
        assert word in error["message"], (word, error["message"])
    return error


def raw_request(url: str, head: bytes, timeout: float = 10) -> bytes:
    """Send ``head`` (request line and headers, maybe a body) as is; the answer's first bytes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head)
        return sock.recv(65536)


# ---------------------------------------------------------------------------- execution settings


@pytest.mark.parametrize("field", ["execute", "executeRoot", "executeWorkdir", "execute_root", "execute_workdir"])
def test_a_reset_over_http_cannot_set_execution(emulator, emulator_server, field):
    value = True if field == "execute" else "/tmp"
    response = requests.post(f"{emulator.url}/emulator/v1/reset", json={"execute": True, field: value}, timeout=10)
    error = assert_google_error(response, 400, repr(field) if field != "execute" else "'execute'", "--execute")
    assert error["details"][0]["fieldViolations"][0]["field"] in (field, "execute")
    assert emulator_server.backend.executor is None and not emulator_server.backend.scenario.execute


def test_a_text_plain_reset_is_refused_before_it_is_read(emulator, emulator_server):
    """What a web page may send to 127.0.0.1 without a CORS preflight."""
    emulator.reset({"seed": 5})
    body = json.dumps({"execute": True, "seed": 9})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = requests.post(f"{emulator.url}/emulator/v1/reset", data=body, headers=headers, timeout=10)
        assert_google_error(response, 400, "Content-Type must be application/json")
    assert emulator_server.backend.scenario.seed == 5 and emulator_server.backend.executor is None


def test_vertex_posts_need_json_too_and_nothing_happens(emulator):
    url = f"{emulator.url}/v1/{PARENT}/customJobs"
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        assert_google_error(requests.post(url, data=json.dumps(job()), headers=headers, timeout=10), 400, "Content-Type")
    assert requests.get(url, timeout=10).json() == {}
    name = requests.post(url, json=job(), timeout=10).json()["name"]
    # a body-less cancel is what a page's <form> or fetch(no-cors) sends: refused; Google's clients send {}
    assert_google_error(requests.post(f"{emulator.url}/v1/{name}:cancel", timeout=10), 400, "Content-Type")
    assert requests.get(f"{emulator.url}/v1/{name}", timeout=10).json()["state"] == "JOB_STATE_QUEUED"
    # charset parameters are fine
    ok = requests.post(f"{emulator.url}/v1/{name}:cancel", data="{}", timeout=10,
                       headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_execution_is_kept_across_a_reset_and_refused_with_allow_remote(tmp_path):
    with pytest.raises(ValueError, match="--allow-remote"):
        EmulatorServer(Scenario(execute=True, execute_root=str(tmp_path)), allow_remote=True)
    with EmulatorServer(Scenario(execute=True, execute_root=str(tmp_path))) as server:
        EmulatorControl(server.url).reset({"seed": 3})
        assert server.backend.executor is not None and server.backend.scenario.seed == 3


def test_the_cli_refuses_execute_with_allow_remote_even_from_a_scenario_file(tmp_path):
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"execute": True}))
    result = subprocess.run([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--host", "0.0.0.0",
                             "--port", "0", "--allow-remote", "--scenario", str(scenario)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "loopback only" in result.stderr


# ---------------------------------------------------------------------------- Host, Origin, token


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.nip.io", "10.0.0.1", "", "[::2]:1"])
def test_a_request_for_another_host_is_refused(emulator, host):
    """DNS rebinding: the page's own name resolves to 127.0.0.1, its requests carry that name."""
    response = requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", headers={"Host": host}, timeout=10)
    assert_google_error(response, 403, "--allow-remote")


@pytest.mark.parametrize("host", ["localhost", "localhost:8765", "LOCALHOST.", "app.localhost", "127.0.0.1",
                                  "127.1.2.3:80", "[::1]:8765"])
def test_loopback_names_are_served(emulator, host):
    response = requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", headers={"Host": host}, timeout=10)
    assert response.status_code == 200, response.text


def test_a_foreign_origin_is_refused(emulator):
    for origin in ("https://evil.example", "null", "http://127.0.0.1.evil.example"):
        response = requests.post(f"{emulator.url}/emulator/v1/reset", json={}, timeout=10,
                                 headers={"Origin": origin})
        assert_google_error(response, 403, "Origin")
    local = requests.post(f"{emulator.url}/emulator/v1/reset", json={}, headers={"Origin": "http://localhost:8765"},
                          timeout=10)
    assert local.status_code == 200


def test_allow_remote_serves_any_host():
    with EmulatorServer(allow_remote=True) as server:
        response = requests.get(f"{server.url}/v1/{PARENT}/customJobs", headers={"Host": "emulator.lan"}, timeout=10)
        assert response.status_code == 200


def test_a_control_token_guards_the_control_api_only():
    with EmulatorServer(control_token="s3cret-token") as server:
        with pytest.raises(RuntimeError, match="401"):
            EmulatorControl(server.url).reset({})
        with pytest.raises(RuntimeError, match="401"):
            EmulatorControl(server.url, control_token="wrong").stats()
        forged = requests.get(f"{server.url}/emulator/v1/traffic", timeout=10,
                              headers={"X-Emulator-Control-Token": "s3cret-tokén".encode().decode("latin-1")})
        assert_google_error(forged, 401, "X-Emulator-Control-Token")
        control = EmulatorControl(server.url, control_token="s3cret-token")
        control.reset({"seed": 2})
        assert server.backend.scenario.seed == 2
        assert requests.get(f"{server.url}/v1/{PARENT}/customJobs", timeout=10).status_code == 200
        assert requests.get(f"{server.url}/emulator/v1/timeline.svg", timeout=10).status_code == 200


def test_the_cli_prints_a_control_token_that_works():
    process = subprocess.Popen([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--port", "0",
                                "--control-token"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = token = None
        for line in process.stdout:
            if "listening on" in line:
                url = line.split()[-1]
            if "control token" in line:
                token = line.split()[-1]
                break
        assert url and token
        with pytest.raises(RuntimeError, match="401"):
            EmulatorControl(url).stats()
        assert "requests" in EmulatorControl(url, control_token=token).stats()
    finally:
        process.terminate()
        process.wait(timeout=30)


# ---------------------------------------------------------------------------- limits


@pytest.mark.parametrize("size, status, words", [
    (MAX_BODY_BYTES + 1, b"400", f"limit: {MAX_BODY_BYTES} bytes".encode()),  # Google's API front end
    (64 * 1024 * 1024, b"413", b"Request Entity Too Large"),  # past the edge's limit (limits.py)
])
def test_a_huge_declared_body_is_refused_unread(emulator, size, status, words):
    head = (f"POST /v1/{PARENT}/customJobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    answer = raw_request(emulator.url, head + b"{")  # the rest never comes: the answer must not wait for it
    assert answer.startswith(b"HTTP/1.1 " + status) and words in answer


def test_a_huge_chunked_body_is_refused_once_past_the_limit(emulator):
    def chunks():
        yield b'{"displayName": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    response = requests.post(f"{emulator.url}/v1/{PARENT}/customJobs", data=chunks(), headers=JSON, timeout=30)
    assert_google_error(response, 400, "Request payload size exceeds the limit")
    assert requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", timeout=10).json() == {}


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000, 200_000])
def test_deep_json_is_a_400_never_a_recursion_error(emulator, depth):
    for path in (f"v1/{PARENT}/customJobs", "emulator/v1/reset", "v2/entries:list", "emulator/v1/auth",
                 f"compute/v1/projects/{PROJECT}/zones/us-central1-a/reservations"):
        body = "[" * depth + "]" * depth
        response = requests.post(f"{emulator.url}/{path}", data=body, headers=JSON, timeout=30)
        assert response.status_code == 400, (path, response.status_code, response.text[:200])
        assert "Invalid JSON payload received" in response.json()["error"]["message"]
    nested: dict = {}
    for _ in range(MAX_JSON_DEPTH - 2):
        nested = {"a": nested}
    fine = requests.post(f"{emulator.url}/v1/{PARENT}/customJobs", json={"labels": nested}, timeout=10)
    assert fine.status_code == 400 and "Nesting" not in fine.text  # refused for its type, not its depth


@pytest.mark.parametrize("seconds", ["1e308", "1e999", "NaN", "Infinity", "-1", "[1]", "\"5\"", "true", "null",
                                     "315360001", "-0.5"])
def test_clock_advance_takes_finite_positive_capped_seconds(emulator, seconds):
    emulator.reset({"speed": 1e-9})  # a clock that stands still: any move is the refused advance's
    before = requests.get(f"{emulator.url}/emulator/v1/clock", timeout=10).json()["now"]
    response = requests.post(f"{emulator.url}/emulator/v1/clock:advance", data=f'{{"seconds": {seconds}}}',
                             headers=JSON, timeout=10)
    assert_google_error(response, 400)
    after = requests.get(f"{emulator.url}/emulator/v1/clock", timeout=10).json()["now"]
    assert after == before  # not moved
    assert emulator.advance(60) > before  # and it still works


def test_the_clock_never_overflows(emulator):
    for _ in range(150):  # 1500 years in steps of 10: refused before the year 9999 overflows
        response = requests.post(f"{emulator.url}/emulator/v1/clock:advance", json={"seconds": 315360000},
                                 timeout=10)
        if response.status_code == 400:
            break
    assert_google_error(response, 400, "would pass")
    assert requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", timeout=10).status_code == 200
    assert requests.post(f"{emulator.url}/v1/{PARENT}/customJobs", json=job(), timeout=10).status_code == 200


@pytest.mark.parametrize("scenario", [{"speed": 0}, {"speed": -1}, {"speed": 1e308}, {"runSeconds": -5},
                                      {"queueSeconds": 1e300}, {"faults": {"latencySeconds": 3600}},
                                      {"faults": {"errorRate": 2}}, {"faults": {"statusCodes": []}},
                                      {"faults": {"statusCodes": [200]}}, {"seed": 10**30}])
def test_scenario_numbers_are_bounded(emulator, emulator_server, scenario):
    emulator.reset({"seed": 4})
    response = requests.post(f"{emulator.url}/emulator/v1/reset", json=scenario, timeout=10)
    assert_google_error(response, 400)
    assert emulator_server.backend.scenario.seed == 4  # the refused reset changed nothing
    for literal in ("NaN", "Infinity", "-Infinity"):
        response = requests.post(f"{emulator.url}/emulator/v1/reset", data=f'{{"speed": {literal}}}', headers=JSON,
                                 timeout=10)
        assert_google_error(response, 400)


def test_a_non_ascii_authorization_header_is_a_401(emulator):
    for value in ("Bearer tökén".encode().decode("latin-1"), "Bearer é", "Bearer \xa0\xff"):
        response = requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", headers={"Authorization": value},
                                timeout=10)
        assert_google_error(response, 401)
    head = (f"GET /v1/projects/-/serviceAccounts/a@b:generateAccessToken HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer \xff\xfe\r\nConnection: close\r\n\r\n").encode("latin-1")
    assert not raw_request(emulator.url, head).startswith(b"HTTP/1.1 5")


def test_auth_settings_of_the_wrong_type_are_refused_and_change_nothing(emulator):
    emulator.set_auth(require_token=True)
    for body in ({"secrets": ["x"]}, {"accessToken": 5}, {"requireToken": "no"}, {"secrets": {"a": {"b": 1}}}):
        response = requests.post(f"{emulator.url}/emulator/v1/auth", json=body, timeout=10)
        assert_google_error(response, 400)
    assert requests.get(f"{emulator.url}/v1/{PARENT}/customJobs", timeout=10).status_code == 401


def test_the_traffic_recorder_keeps_no_huge_body(emulator):
    emulator.start_traffic()
    big = job()
    big["displayName"] = "x" * (300 * 1024)
    requests.post(f"{emulator.url}/v1/{PARENT}/customJobs", json=big, timeout=10)
    exchange = emulator.traffic()[-1]
    assert exchange["requestBody"] is None and exchange["requestBodyBytes"] > 300 * 1024
