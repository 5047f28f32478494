"""Hostile requests against every route of the emulator (hypothesis): wrong types and shapes, deep
nesting, odd unicode, huge and negative numbers, forged tokens, odd headers, wrong methods and
content types. Each request must get an answer within the socket timeout (a hang fails the test, no
timing threshold on speed), never a 5xx (an injected fault the fuzz itself configured excepted),
and every 4xx in the error shape of the Google service behind the route; afterwards the server
still answers a plain list. docs/security.md ("The emulator") describes what is refused.

``make test`` sends 10,000+ requests in all (each drawn payload goes to every route of its group);
tests/test_emulator_fuzz_surface.py adds 10,000+ property-based requests over the whole surface
(durations, env knobs, filters, heads, form and JWT bodies; in-process, no request over 2 s);
the ``reliability`` variant ten times more. Derandomized: the same requests every run (reproducible in CI); a failure is shrunk and shown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from airflow_gpu_sched.emulator.urls import ROUTES
from airflow_gpu_sched.emulator.control import EmulatorControl

PROJECT, LOCATION, ZONE = "fuzz-project", "us-central1", "us-central1-a"
TIMEOUT = (5, 30)  # connect, read (seconds): an answer that does not come in time is a hang
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "186"))  # per group (GROUPS); the variable: a quicker local run
RELIABILITY_EXAMPLES = 1860


# ---------------------------------------------------------------------------- the routes


def _template(pattern: str) -> str:
    """A route regex of emulator/app.py ROUTES as a path template: ``{project}``, ``{id}``."""
    text = pattern.strip("^$")
    text = re.sub(r"\(\?P<(\w+)>\[\^/:\]\+\)", r"{\1}", text)
    text = text.replace("[^/:]+", "{id}").replace("(?P<name>", "")
    return text.replace(")", "")


VERTEX = [(method, "/v1/" + _template(pattern.pattern), "google") for method, pattern, _ in ROUTES]
TOKEN_SERVICES = [("POST", "/v1/projects/-/serviceAccounts/{id}:generateAccessToken", "google"),
                  ("GET", "/v1/projects/{project}/secrets/{id}/versions/{id}:access", "google"),
                  ("POST", "/v1/token", "oauth"), ("POST", "/token", "oauth")]
LOGGING = [("POST", "/v2/entries:list", "google")]
BILLING = [("GET", "/v1/services/{id}/skus", "google")]  # cloudbilling v1 services.skus.list (emulator/billing_api.py)
COMPUTE = [("POST", "/compute/v1/projects/{project}/zones/{zone}/reservations", "compute"),
           ("GET", "/compute/v1/projects/{project}/zones/{zone}/reservations", "compute"),
           ("GET", "/compute/v1/projects/{project}/zones/{zone}/reservations/{id}", "compute"),
           ("GET", "/compute/v1/projects/{project}/zones/{zone}/operations/{id}", "compute")]
UI = [("GET", "/ui/projects/{project}/locations/{location}/operations/{id}", "google"), ("GET", "/", "html")]
CONTROL = [(m, f"/emulator/v1/{p}", "google") for m, p in [
    ("POST", "reset"), ("POST", "capacity"), ("POST", "quota"), ("POST", "quotas"), ("GET", "quotas"),
    ("POST", "faults"), ("POST", "auth"), ("GET", "auth"), ("POST", "traffic:start"), ("POST", "traffic:stop"),
    ("GET", "traffic"), ("GET", "stats"), ("GET", "clock"), ("POST", "clock:advance"), ("GET", "timeline.svg"),
    ("POST", "{job}:preempt"), ("POST", "{job}:setState"), ("GET", "{job}:history")]]
ALL_ROUTES = VERTEX + TOKEN_SERVICES + LOGGING + BILLING + COMPUTE + UI + CONTROL


def test_the_fuzz_covers_every_route_of_the_app():
    """Every route the app registers is one the fuzz sends to (a new route is fuzzed or fails here)."""
    from airflow_gpu_sched.emulator.app import create_app

    covered = {path.split("{", 1)[0].rstrip("/") for _, path, _ in ALL_ROUTES}
    registered = {route.path for route in create_app().routes}
    for path in registered:
        prefix = path.split("{", 1)[0].rstrip("/")
        assert any(c == prefix or c.startswith(prefix) for c in covered) or prefix == "", path
    assert {rpc for _, _, rpc in ROUTES} and len(VERTEX) == len(ROUTES)


# ---------------------------------------------------------------------------- hostile values

ODD_TEXT = st.sampled_from(["", " ", "..", "../..", "%2e%2e", "\u202e", "\ufeff", "é", "名前", "\U0001f600", "\x00",
                            "a" * 5000, "-", "1e999", "NaN", "null", "[]", "{}", "'", '"', "\\", "${x}", "{{x}}",
                            "9" * 30, "-1", "0", "projects/-"])
TEXT = st.one_of(ODD_TEXT, st.text(max_size=40), st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
SEGMENT = st.one_of(st.sampled_from([PROJECT, LOCATION, "123", "1000000000000000001", "global", "-"]),
                    st.text(alphabet=st.characters(blacklist_characters="/?#", codec="utf-8"), min_size=1,
                            max_size=30))
NUMBER = st.one_of(st.integers(), st.sampled_from([10**30, -(10**30), 2**63, -(2**63) - 1, 10**4000]),
                   st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e308, -1e308, 5e-324]))
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON_VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


def _valid_job() -> dict:
    return {"displayName": "fuzz", "labels": {"a": "b"}, "jobSpec": {
        "workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                             "acceleratorCount": 1}, "replicaCount": "1",
                             "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/i:1", "args": ["--x=1"]}}],
        "scheduling": {"strategy": "SPOT", "timeout": "3600s", "maxWaitDuration": "60s"}}}


KNOWN_KEYS = ["displayName", "jobSpec", "workerPoolSpecs", "machineSpec", "acceleratorCount", "replicaCount",
              "scheduling", "strategy", "labels", "seconds", "speed", "execute", "executeRoot", "faults",
              "errorRate", "statusCodes", "latencySeconds", "location", "acceleratorType", "standard", "spot",
              "flexStart", "atSeconds", "metric", "limit", "region", "deny", "accessToken", "requireToken",
              "secrets", "state", "message", "resourceNames", "filter", "pageSize", "orderBy", "pageToken",
              "scope", "delegates", "lifetime", "name", "specificReservation", "count", "queueSeconds",
              "capacity", "quotas", "variants", "persistentResources", "studySpec", "trialJobSpec",
              "maxTrialCount", "parallelTrialCount", "trainingTaskDefinition", "trainingTaskInputs"]


@st.composite
def mutated(draw, base: dict) -> dict:
    """A valid-looking body with some values swapped for hostile ones, some keys added."""
    body = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(0, 4))):
        node = body
        path = draw(st.lists(st.sampled_from(KNOWN_KEYS + ["0"]), min_size=0, max_size=3))
        for key in path:
            if isinstance(node, dict) and key in node and isinstance(node[key], (dict, list)):
                node = node[key]
            elif isinstance(node, list) and node and isinstance(node[0], (dict, list)):
                node = node[0]
        if isinstance(node, dict):
            node[draw(st.sampled_from(KNOWN_KEYS))] = draw(JSON_VALUE)
    return body


def deep(kind: str, depth: int) -> str:
    return {"list": "[" * depth + "]" * depth, "object": '{"a":' * depth + "1" + "}" * depth,
            "unclosed": '{"a":[' * depth}[kind]


RAW_BODIES = st.one_of(
    st.builds(deep, st.sampled_from(["list", "object", "unclosed"]), st.sampled_from([50, 101, 1000, 20_000])),
    st.sampled_from(['{"seconds": NaN}', '{"seconds": 1e999}', '{"speed": Infinity}', "1" * 5000, '"\\ud800"',
                     '{"a": 1, "a": 2}', "\xff\xfe", "{" * 3, "null", "[]", "true", '{"seconds": -1e308}',
                     '{"seconds": [1]}', "{\"\\u0000\": 1}"]),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")))
BODIES = st.one_of(
    st.just(None), st.builds(json.dumps, JSON_VALUE), st.builds(json.dumps, mutated(_valid_job())),
    st.builds(json.dumps, st.dictionaries(st.sampled_from(KNOWN_KEYS), JSON_VALUE, max_size=5)), RAW_BODIES)
# Query parameters: the methods' own (so a request reaches its handler) with hostile values, and
# now and then one the method lacks. Filters deeper than the grammar allows and page tokens holding
# out-of-range numbers are helper "filters"' part (issue 21): see test_deep_filters_and_odd_page_tokens.
QUERY = {"filter": st.one_of(TEXT, st.sampled_from(['state="JOB_STATE_RUNNING"', "labels.a=b AND NOT x",
                                                    "create_time>1e999", 'display_name:"*"', "a=", "=", "(", ")",
                                                    "labels.é=é", "state=JOB_STATE_RUNNING OR"])),
         "pageSize": st.one_of(st.builds(str, NUMBER), TEXT),
         "pageToken": st.one_of(TEXT, st.sampled_from(["eyJwIjoiMSIsImYiOiIifQ==", "eyJwIjoxLCJmIjoiIn0=",
                                                       "e30=", "bnVsbA==", "W10=", "!!", "=" * 10])),
         "readMask": st.one_of(TEXT, st.sampled_from(["name,state", "jobSpec.workerPoolSpecs", "*", ",", "a..b"])),
         "persistentResourceId": SEGMENT, "maxResults": st.builds(str, NUMBER), "alt": TEXT, "$fields": TEXT,
         "orderBy": TEXT, "x": TEXT}
QUERY_NAMES = list(QUERY)
LATIN1 = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
                 max_size=60).map(str.lstrip)  # what a header carries (the HTTP parser refuses controls)
HEADERS = st.fixed_dictionaries({}, optional={
    "Authorization": st.one_of(LATIN1, st.sampled_from(["Bearer ", "Bearer emulator-forged", "Basic Zm9vOmJhcg==",
                                                        "Bearer " + "x" * 4000, "bearer\temulator-",
                                                        "Bearer tökén".encode().decode("latin-1")])),
    "Host": st.sampled_from(["127.0.0.1", "localhost", "evil.example", "127.0.0.1.nip.io", "[::1]", "", "a" * 300]),
    "Origin": st.sampled_from(["null", "https://evil.example", "http://localhost:1", "file://", "http://[::1]"]),
    "X-Emulator-Control-Token": LATIN1,
    "X-Goog-User-Project": LATIN1, "X-HTTP-Method-Override": st.sampled_from(["DELETE", "GET", "PATCH", "ÿ"]),
    "Content-Encoding": st.sampled_from(["gzip", "br", "identity"]),
    "Accept": st.sampled_from(["*/*", "text/html", "application/x-protobuf"]),
    "Transfer-Encoding": st.just("chunked")})
CONTENT_TYPES = st.sampled_from([None, "application/json", "application/json", "application/json; charset=utf-8",
                                 "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                 "application/JSON", "application/json-patch+json", "ÿ"])
METHODS = ["GET", "POST", "DELETE", "PATCH", "PUT", "OPTIONS", "HEAD"]


@dataclass
class Request:
    method: str
    path: str
    shape: str
    query: list[tuple[str, str]] = field(default_factory=list)
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Payload:
    """One hostile draw, sent to every route of a group (each route: every route, at little cost)."""

    segments: dict[str, str]
    query: list[tuple[str, str]]
    body: str | None
    headers: dict[str, str]
    wrong_method: str | None

    def requests(self, routes: list[tuple[str, str, str]]) -> list[Request]:
        out = []
        for method, template, shape in routes:
            path = re.sub(r"\{(\w+)\}", lambda m: self.segments.get(m.group(1), self.segments["id"]), template)
            headers = dict(self.headers)
            if shape == "oauth" and headers.get("Content-Type") == "application/json":
                headers["Content-Type"] = "application/x-www-form-urlencoded"  # reach the form parsers too
            out.append(Request(self.wrong_method or method, path, shape, self.query, self.body, headers))
        return out


@st.composite
def payloads(draw, jobs: list[str]) -> Payload:
    segments = {"project": draw(st.one_of(st.just(PROJECT), SEGMENT)),
                "location": draw(st.one_of(st.just(LOCATION), SEGMENT)),
                "zone": draw(st.one_of(st.just(ZONE), SEGMENT)), "id": draw(SEGMENT),
                "service": draw(st.one_of(st.just("aiplatform.googleapis.com"), SEGMENT)),
                "job": draw(st.one_of(st.sampled_from(jobs), SEGMENT))}
    names = draw(st.lists(st.sampled_from(QUERY_NAMES[:5]), max_size=3, unique=True))
    if draw(st.integers(0, 4)) == 0:
        names.append(draw(st.sampled_from(QUERY_NAMES[5:])))
    query = [(name, draw(QUERY[name])) for name in names]
    # hostile headers in a third of the payloads: the rest reach the handlers behind the front door
    hostile = draw(st.integers(0, 2)) == 0
    headers = {k: v for k, v in (draw(HEADERS) if hostile else {}).items() if k != "Transfer-Encoding"}
    content_type = draw(CONTENT_TYPES) if hostile else "application/json"
    if content_type:
        headers["Content-Type"] = content_type
    wrong = draw(st.one_of(st.none(), st.none(), st.none(), st.sampled_from(METHODS)))
    return Payload(segments, query, draw(BODIES), headers, wrong)


# ---------------------------------------------------------------------------- the checks


def _error_shape(response: requests.Response, shape: str) -> None:
    if shape == "html" and response.status_code < 400:
        return
    body = response.json()
    error = body["error"]
    if shape == "oauth" and isinstance(error, str):  # STS: RFC 6749 {"error": code, "error_description"}
        assert isinstance(body.get("error_description"), str)
        return
    assert error["code"] == response.status_code and isinstance(error["message"], str), body
    if shape == "compute" and "status" not in error:  # Compute's own shape: code, message, errors[]
        assert isinstance(error["errors"], list), body
        return
    assert isinstance(error["status"], str) and error["status"].isupper(), body


def send(session: requests.Session, url: str, request: Request) -> requests.Response:
    data = request.body.encode("utf-8", "surrogatepass") if request.body is not None else None
    prepared = requests.Request(request.method, url + request.path, params=request.query, data=data,
                                headers=request.headers).prepare()
    if "Content-Type" not in request.headers:
        prepared.headers.pop("Content-Type", None)
    try:
        return session.send(prepared, timeout=TIMEOUT, allow_redirects=False)
    except requests.exceptions.Timeout:
        pytest.fail(f"no answer in {TIMEOUT[1]} s (a hang): {request}")


def check(response: requests.Response, request: Request) -> None:
    status = response.status_code
    if status >= 500:
        injected = response.headers.get("content-type", "").startswith("application/json") and \
            "Injected fault" in response.text  # the fuzz itself set faults through the control API
        assert injected, f"{status} for {request}: {response.text[:500]}"
        return
    if status >= 400 and request.method != "HEAD":
        try:
            _error_shape(response, request.shape)
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            pytest.fail(f"{status} not in Google's error shape ({exc!r}) for {request}: {response.text[:300]}")


@pytest.fixture(scope="module")
def fuzz_server():
    """The emulator as the CLI serves it, in its own process (the fuzz's client gets a core of its own)."""
    process = subprocess.Popen([sys.executable, "-m", "airflow_gpu_sched.tools.cli", "emulator", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in process.stdout:
            if "listening on" in line:
                url = line.split()[-1]
                break
        assert url, "the emulator did not start"
        threading.Thread(target=process.stdout.read, daemon=True).start()  # never a full pipe
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def fuzz_jobs(fuzz_server) -> list[str]:
    """A few real resources, so that hostile requests also reach existing jobs."""
    url = f"{fuzz_server}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"
    return [requests.post(url, json=_valid_job(), timeout=TIMEOUT).json()["name"] for _ in range(3)]


def _fuzz(url: str, routes: list, jobs: list[str], examples: int, reset_after: bool) -> int:
    session = requests.Session()
    session.trust_env = False  # no proxy look-up per request (a third of the client's time)
    control = EmulatorControl(url, timeout=TIMEOUT[1])
    sent = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(payloads(jobs))
    def run(payload: Payload) -> None:
        try:
            for request in payload.requests(routes):
                check(send(session, url, request), request)
                sent.append(1)
        finally:
            if reset_after:  # the control API may have set faults, latency, tokens: start clean
                control.reset({})

    run()
    # the server still answers a plain list, in Google's shape
    listed = requests.get(f"{url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs", timeout=TIMEOUT)
    assert listed.status_code == 200 and isinstance(listed.json(), dict), listed.text[:300]
    return len(sent)


# Each example is sent to every route of its group; make test: EXAMPLES x (27 + 18 + 9) routes
# = 10,000+ requests. "control" sends the routes that set faults and tokens: each example ends
# with a reset there (a fault's latency would slow every later request).
GROUPS = {"vertex": VERTEX + UI, "control": CONTROL, "services": TOKEN_SERVICES + LOGGING + BILLING + COMPUTE}


@pytest.mark.parametrize("group", list(GROUPS))
def test_hostile_requests_get_no_5xx_no_hang_and_google_shaped_errors(fuzz_server, fuzz_jobs, group):
    sent = _fuzz(fuzz_server, GROUPS[group], fuzz_jobs, EXAMPLES, reset_after=group == "control")
    assert sent >= EXAMPLES * len(GROUPS[group])  # every request answered and checked (check() per answer)


def test_the_fuzz_sends_at_least_ten_thousand_requests_in_make_test():
    assert EXAMPLES * sum(len(routes) for routes in GROUPS.values()) >= 10_000 or "FUZZ_EXAMPLES" in os.environ


DEEP_FILTERS = ["(" * 5000 + ")" * 5000, "(" * 5000 + "a=b" + ")" * 5000, "NOT " * 3000 + "a=b", "a=b AND " * 5000 + "c=d",
                "x" * 50_000]
ODD_PAGE_TOKENS = ["eyJwIjogMWU5OTl9", "eyJwIjogIk5hTiJ9", "eyJwIjogW119", "eyJwIjogMWUzMDh9", "A" * 20_000]
# A 100,000-character URL is a head over 64 KiB: refused with a 431 in the JSON error shape before it
# is buffered (emulator/http_limits.py; Google's front end answers an over-long URL with its own 414 page).
HUGE_PAGE_TOKEN = "A" * 100_000


def _filters_unhardened() -> bool:
    """True while emulator/filters.py recurses without a limit (helper "filters", issue 21, hardens it)."""
    from airflow_gpu_sched.emulator.filters import parse_filter

    try:
        parse_filter("(" * 5000 + "a=b" + ")" * 5000, "customJobs")
    except RecursionError:
        return True
    except Exception:  # noqa: BLE001 (any refusal: hardened)
        return False
    return False


@pytest.mark.xfail(condition=_filters_unhardened(), strict=True,
                   reason="deep filters and out-of-range page tokens get a 500 until helper 'filters' (issue 21: "
                          "filter nesting limit, page-token hardening) is merged")
def test_deep_filters_and_odd_page_tokens_get_no_5xx(fuzz_server):
    session = requests.Session()
    session.trust_env = False
    for method, template, shape in VERTEX + COMPUTE:
        if method != "GET" or not template.endswith(("Jobs", "Pipelines", "models", "Resources", "reservations",
                                                     "quotaInfos")):
            continue
        path = template.format(project=PROJECT, location=LOCATION, zone=ZONE, service="aiplatform.googleapis.com")
        for query in [[("filter", f)] for f in DEEP_FILTERS] + [[("pageToken", t)] for t in ODD_PAGE_TOKENS]:
            request = Request(method, path, shape, query)
            check(send(session, fuzz_server, request), request)


@pytest.mark.reliability
@pytest.mark.parametrize("group", list(GROUPS))
def test_ten_times_more_hostile_requests(fuzz_server, fuzz_jobs, group):
    sent = _fuzz(fuzz_server, GROUPS[group], fuzz_jobs, RELIABILITY_EXAMPLES, reset_after=group == "control")
    assert sent >= RELIABILITY_EXAMPLES * len(GROUPS[group])


def test_a_huge_page_token_gets_googles_error_shape(fuzz_server):
    session = requests.Session()
    session.trust_env = False
    path = f"/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"
    request = Request("GET", path, "google", [("pageToken", HUGE_PAGE_TOKEN)])
    check(send(session, fuzz_server, request), request)
