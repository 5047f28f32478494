"""Every credential source the Google provider reads, used for real against the emulator over
loopback TLS (the client loads credentials only for https): a key (``keyfile_dict``), a key in
Secret Manager (``key_secret_name``), a workload identity federation config
(``credential_config_file``), Application Default Credentials, and impersonation through a
chain (``impersonation_chain``). The emulator's stand-ins (OAuth ``/token``, IAM Credentials
``generateAccessToken``, STS ``/v1/token``, Secret Manager ``versions:access``) record what they
were asked and which token each Vertex call carried, so each test proves which credentials
reached Vertex; no token or key is ever part of an error.
"""

from __future__ import annotations

import json
import secrets

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.vertex.client import ConnectionSettings, VertexClient, VertexError
from airflow_gpu_sched.vertex.client import sources
from tests.e2e.test_security import _loopback_tls, _pem

PROJECT, LOCATION = "auth-project", "us-central1"
AUDIENCE = "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/ci/providers/github"
TARGET = "trainer@auth-project.iam.gserviceaccount.com"
HOP = "hop@other-project.iam.gserviceaccount.com"


def _key(token_uri: str, email: str) -> dict:
    return {"type": "service_account", "project_id": PROJECT, "private_key_id": secrets.token_hex(20),
            "private_key": _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "client_email": email, "client_id": "100000000000000000002", "token_uri": token_uri}


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth-tls")
    certfile, keyfile = _loopback_tls(root)
    with EmulatorServer(ssl_certfile=certfile, ssl_keyfile=keyfile) as server:
        control = EmulatorControl(server.url)
        control._session.verify, control._session.trust_env = certfile, False
        yield server.url, certfile, control


@pytest.fixture
def env(tls, monkeypatch, tmp_path):
    """A reset emulator that answers 401 to Vertex calls without an issued token; the CA
    trusted by requests (the client and google-auth); no ambient credentials."""
    url, certfile, control = tls
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certfile)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # never the developer's gcloud login
    control.reset({"seed": 3, "speed": 1})
    tokens = {"source": "ya29.source-" + secrets.token_urlsafe(16),
              "impersonated": "ya29.impersonated-" + secrets.token_urlsafe(16),
              "federated": "ya29.federated-" + secrets.token_urlsafe(16),
              "subject": "eyJ.subject-" + secrets.token_urlsafe(16)}
    control.set_auth(tokens["source"], require_token=True, impersonated_token=tokens["impersonated"],
                     federated_token=tokens["federated"], subject_token=tokens["subject"])
    return url, control, tokens


def _vertex_calls(control: EmulatorControl) -> tuple[int, dict]:
    stats = control.stats()
    return sum(stats["requests"].values()), stats


def _list(settings: ConnectionSettings) -> None:
    with VertexClient(LOCATION, settings=settings) as client:
        client.list_custom_jobs_page()
        client.list_custom_jobs_page()


def test_impersonation_chain_of_the_connection_reaches_vertex_with_the_impersonated_token(env):
    url, control, _ = env
    key = _key(f"{url}/token", "source@auth-project.iam.gserviceaccount.com")
    settings = ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url,
                                               "keyfile_dict": json.dumps(key),
                                               "impersonation_chain": f"{HOP}, {TARGET}"})
    _list(settings)
    records = control.auth_records()
    # one generateAccessToken, for the target, through the delegate in the API's documented form,
    # authorized by the source key's token
    assert records["impersonations"] == [{"target": TARGET, "delegates": [f"projects/-/serviceAccounts/{HOP}"],
                                          "scope": ["https://www.googleapis.com/auth/cloud-platform"],
                                          "caller": "authorizedRequests"}]
    assert [g["issuer"] for g in records["grants"]] == [key["client_email"]]
    calls, stats = _vertex_calls(control)
    assert calls == 2 and stats["impersonatedRequests"] == calls, stats
    assert stats.get("authorizedRequests", 0) == 0, "the source token reached Vertex"


def test_operator_argument_wins_over_the_connection_chain(env):
    url, control, _ = env
    key = _key(f"{url}/token", "source@auth-project.iam.gserviceaccount.com")
    settings = ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url, "keyfile_dict": key,
                                               "impersonation_chain": "someone-else@x.iam.gserviceaccount.com"})
    _list(settings.with_overrides(impersonation_chain=[TARGET]))
    assert [(r["target"], r["delegates"]) for r in control.auth_records()["impersonations"]] == [(TARGET, [])]


def test_workload_identity_federation_config_exchanges_the_subject_token_at_sts(env, tmp_path):
    """A planted external-account config (as ``gcloud iam workload-identity-pools
    create-cred-config`` writes it) whose subject token is a file: STS exchanges it, Vertex
    sees only the federated token. As a path and as the JSON string."""
    url, control, tokens = env
    subject = tmp_path / "oidc-token"
    subject.write_text(tokens["subject"])
    config = {"type": "external_account", "audience": AUDIENCE,
              "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": f"{url}/v1/token",
              "credential_source": {"file": str(subject)}}
    path = tmp_path / "wif.json"
    path.write_text(json.dumps(config))
    for value in (str(path), json.dumps(config)):
        control.reset({"seed": 3, "speed": 1})
        control.set_auth(tokens["source"], require_token=True, federated_token=tokens["federated"],
                         subject_token=tokens["subject"])
        _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url,
                                              "credential_config_file": value}))
        exchanges = control.auth_records()["exchanges"]
        assert exchanges == [{"audience": AUDIENCE, "subjectTokenType": "urn:ietf:params:oauth:token-type:jwt",
                              "scope": "https://www.googleapis.com/auth/cloud-platform",
                              "subjectTokenMatched": True}]
        calls, stats = _vertex_calls(control)
        assert calls == 2 and stats["federatedRequests"] == calls, stats


def test_federated_identity_can_impersonate_too(env, tmp_path):
    url, control, tokens = env
    subject = tmp_path / "oidc-token"
    subject.write_text(tokens["subject"])
    config = {"type": "external_account", "audience": AUDIENCE, "token_url": f"{url}/v1/token",
              "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "credential_source": {"file": str(subject)}}
    _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url, "credential_config_file": config,
                                          "impersonation_chain": [TARGET]}))
    assert [r["caller"] for r in control.auth_records()["impersonations"]] == ["federatedRequests"]
    calls, stats = _vertex_calls(control)
    assert stats["impersonatedRequests"] == calls == 2 and not stats.get("federatedRequests"), stats


def test_wrong_subject_token_fails_without_quoting_any_token(env, tmp_path):
    url, control, tokens = env
    subject = tmp_path / "oidc-token"
    wrong = "eyJ.wrong-" + secrets.token_urlsafe(16)
    subject.write_text(wrong)
    config = {"type": "external_account", "audience": AUDIENCE, "token_url": f"{url}/v1/token",
              "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "credential_source": {"file": str(subject)}}
    with pytest.raises(Exception) as caught:
        _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url,
                                              "credential_config_file": config}))
    assert "invalid_grant" in str(caught.value)
    assert wrong not in str(caught.value) and tokens["federated"] not in str(caught.value)
    assert control.auth_records()["exchanges"][0]["subjectTokenMatched"] is False
    assert sum(control.stats()["requests"].values()) == 0  # nothing reached Vertex


def test_key_secret_name_reads_the_key_from_secret_manager_with_adc_then_uses_it(env, tmp_path, monkeypatch):
    url, control, tokens = env
    reader = _key(f"{url}/token", "secret-reader@auth-project.iam.gserviceaccount.com")
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps(reader))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    trainer = _key(f"{url}/token", TARGET)
    control.set_auth(tokens["source"], require_token=True,
                     secrets={f"projects/{PROJECT}/secrets/trainer-key": json.dumps(trainer)})
    # key_secret_project_id left out: the ADC key's project, as the Google provider does
    _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url, "key_secret_name": "trainer-key"}))
    records = control.auth_records()
    assert records["secretAccesses"] == [{"name": f"projects/{PROJECT}/secrets/trainer-key", "version": "latest",
                                          "caller": "authorizedRequests"}]
    # the reader's key bought the token for Secret Manager, the secret's key the one for Vertex
    assert [g["issuer"] for g in records["grants"]] == [reader["client_email"], TARGET]
    calls, stats = _vertex_calls(control)
    assert calls == 2 and stats["authorizedRequests"] == calls


def test_missing_secret_names_the_secret_and_the_permission(env, tmp_path, monkeypatch):
    url, control, _ = env
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps(_key(f"{url}/token", "secret-reader@auth-project.iam.gserviceaccount.com")))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    settings = ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url,
                                               "key_secret_name": "absent", "key_secret_project_id": "elsewhere"})
    with pytest.raises(PermissionError, match=r"'absent' of project 'elsewhere'.*404.*secretmanager.versions.access"):
        _list(settings)


def test_application_default_credentials_from_google_application_credentials(env, tmp_path, monkeypatch):
    url, control, _ = env
    key = _key(f"{url}/token", "adc@auth-project.iam.gserviceaccount.com")
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps(key))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url}))
    assert [g["issuer"] for g in control.auth_records()["grants"]] == [key["client_email"]]
    calls, stats = _vertex_calls(control)
    assert calls == 2 and stats["authorizedRequests"] == calls


def test_refused_impersonation_quotes_no_token(env):
    """The source token is revoked: generateAccessToken answers 401; the error says so and
    carries neither the source token nor a private key."""
    url, control, tokens = env
    key = _key(f"{url}/token", "source@auth-project.iam.gserviceaccount.com")
    control.set_auth(tokens["source"], reject_tokens=True, impersonated_token=tokens["impersonated"])
    with pytest.raises(Exception) as caught:
        _list(ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url, "keyfile_dict": key,
                                              "impersonation_chain": TARGET}))
    text = str(caught.value) + repr(caught.value)
    assert "UNAUTHENTICATED" in text or "invalid authentication" in text, text
    assert tokens["source"] not in text and tokens["impersonated"] not in text
    assert not any(line in text for line in key["private_key"].splitlines()[1:-1])
    assert not isinstance(caught.value, VertexError)  # it failed at the token, before Vertex


# --------------------------------------------------------------------------- reading the connection


def test_sources_are_mutually_exclusive_as_in_the_google_provider():
    with pytest.raises(ValueError, match="key_path, key_secret_name are mutually exclusive"):
        ConnectionSettings.from_extras({"key_path": "/k.json", "key_secret_name": "k"})


@pytest.mark.parametrize("value, chain", [
    ("a@p.iam.gserviceaccount.com", ("a@p.iam.gserviceaccount.com",)),
    ("a@p.iam.gserviceaccount.com, b@q.iam.gserviceaccount.com",
     ("a@p.iam.gserviceaccount.com", "b@q.iam.gserviceaccount.com")),
    (["a@p.iam.gserviceaccount.com", "b@q.iam.gserviceaccount.com"],
     ("a@p.iam.gserviceaccount.com", "b@q.iam.gserviceaccount.com")),
    ("", None),
])
def test_impersonation_chain_forms(value, chain):
    settings = ConnectionSettings.from_extras({"extra__google_cloud_platform__impersonation_chain": value})
    assert settings.impersonation_chain == chain


def test_impersonated_account_gives_the_project_unless_the_connection_names_one():
    chain = {"impersonation_chain": "t@target-project.iam.gserviceaccount.com"}
    assert ConnectionSettings.from_extras(chain).project_id == "target-project"
    assert ConnectionSettings.from_extras({**chain, "project": "mine"}).project_id == "mine"


def test_bad_secret_name_and_bad_config_name_the_field_and_echo_nothing():
    with pytest.raises(ValueError, match="key_secret_name 'a/b' is not a Secret Manager secret id"):
        sources.secret_url("p", "a/b", None)
    with pytest.raises(ValueError, match="credential_config_file is neither") as caught:
        sources.credential_config('{"client_secret": "SECRET-MATERIAL", ')
    assert "SECRET-MATERIAL" not in str(caught.value)


def test_keyfile_with_literal_backslash_n_is_repaired_as_the_google_provider_does():
    pasted = {"private_key": "-----BEGIN-----\\nabc\\n-----END-----"}
    settings = ConnectionSettings.from_extras({"keyfile_dict": pasted})
    assert settings.keyfile_dict["private_key"] == "-----BEGIN-----\nabc\n-----END-----"


def test_service_roots_follow_api_endpoint():
    assert sources.secret_url("p", "s", None) == \
        "https://secretmanager.googleapis.com/v1/projects/p/secrets/s/versions/latest:access"
    assert sources.secret_url("p", "s", "us-central1-aiplatform.googleapis.com").startswith(
        "https://secretmanager.googleapis.com/v1/")
    assert sources.secret_url("p", "s", "https://127.0.0.1:8443").startswith("https://127.0.0.1:8443/v1/projects/p/")


# --------------------------------------------------------------------------- through an operator


@pytest.mark.parametrize("deferrable", [True, False])
def test_operator_impersonation_chain_reaches_every_vertex_call_of_the_task_and_its_trigger(
        airflow_db, tls, env, monkeypatch, deferrable):
    """``impersonation_chain`` on the operator, under ``dag.test()``: the worker's create and the
    trigger's polls (async client, or the worker's own polls) all carry the impersonated token."""
    from datetime import datetime, timezone

    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import FlexStartTrainingOperator
    from tests.airflow_harness import run_dag, set_connection_env
    from tests.conftest import FAST

    url, control, tokens = env
    control.reset(FAST)
    control.set_auth(tokens["source"], require_token=True, impersonated_token=tokens["impersonated"])
    monkeypatch.setenv("SSL_CERT_FILE", tls[1])  # httpx (the trigger's client) reads this one
    key = _key(f"{url}/token", "source@auth-project.iam.gserviceaccount.com")
    set_connection_env(monkeypatch, "gcp_impersonating", "google_cloud_platform",
                       extra={"project": PROJECT, "api_endpoint": url, "keyfile_dict": json.dumps(key)})
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG(f"impersonated_{deferrable}", schedule=None, start_date=start) as dag:
        FlexStartTrainingOperator(
            task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
            max_wait_duration="1h", poll_interval=0.02, gcp_conn_id="gcp_impersonating",
            impersonation_chain=[HOP, TARGET], deferrable=deferrable, quota_preflight=False)
    result = run_dag(dag, logical_date=start)
    assert result.state == "success"
    calls, stats = _vertex_calls(control)
    assert stats["jobsCreated"] == {"FLEX_START": 1}
    assert calls > 2 and stats["impersonatedRequests"] == calls and not stats.get("authorizedRequests"), stats
    assert {(r["target"], tuple(r["delegates"])) for r in control.auth_records()["impersonations"]} == {
        (TARGET, (f"projects/-/serviceAccounts/{HOP}",))}


# --------------------------------------------------------------------------- the client-credentials grant


class _IdP:
    """A stand-in OAuth 2.0 token endpoint (the IdP of the Google provider's "Client Credentials
    Grant Flow") on loopback http: answers ``client_credentials`` with ``token`` for the right
    client, 401 otherwise; records what it was asked."""

    def __init__(self, client_id: str, client_secret: str, token: str):
        import http.server
        import threading
        import urllib.parse

        idp = self
        self.requests: list[dict] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                idp.requests.append(form)
                ok = form == {"grant_type": "client_credentials", "client_id": client_id,
                              "client_secret": client_secret, **idp.extra}
                body = json.dumps({"access_token": token, "expires_in": 3600, "token_type": "Bearer"} if ok
                                  else {"error": "invalid_client", "echo": form}).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.extra: dict[str, str] = {}
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _grant_config(url: str) -> dict:
    # an identity pool config without a credential_source: the IdP's token is the subject token
    return {"type": "external_account", "audience": AUDIENCE, "token_url": f"{url}/v1/token",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt"}


def test_client_credentials_grant_gets_the_idps_token_exchanged_at_sts_and_only_that_reaches_vertex(env):
    """``idp_issuer_url``/``client_id``/``client_secret`` (the Google provider's client credentials
    grant, with a workload identity federation config): the IdP's token is the STS subject
    token, Vertex sees only the federated token. Not Application Default Credentials."""
    url, control, tokens = env
    client_secret = "cs-" + secrets.token_urlsafe(16)
    idp = _IdP("airflow-client", client_secret, tokens["subject"])
    idp.extra = {"audience": "vertex"}
    try:
        _list(ConnectionSettings.from_extras({
            "project": PROJECT, "api_endpoint": url, "credential_config_file": json.dumps(_grant_config(url)),
            "idp_issuer_url": idp.url, "client_id": "airflow-client", "client_secret": client_secret,
            "idp_extra_parameters": json.dumps({"audience": "vertex"})}))
    finally:
        idp.close()
    assert len(idp.requests) == 1  # cached for its expires_in
    exchanges = control.auth_records()["exchanges"]
    assert [e["subjectTokenMatched"] for e in exchanges] == [True]
    calls, stats = _vertex_calls(control)
    assert calls == 2 and stats["federatedRequests"] == calls, stats


def test_a_refused_client_credentials_grant_names_the_issuer_and_quotes_no_secret(env):
    url, control, tokens = env
    idp = _IdP("airflow-client", "the-right-secret", tokens["subject"])
    wrong = "wrong-" + secrets.token_urlsafe(16)
    try:
        with pytest.raises(Exception) as caught:
            _list(ConnectionSettings.from_extras({
                "project": PROJECT, "api_endpoint": url, "credential_config_file": _grant_config(url),
                "idp_issuer_url": idp.url, "client_id": "airflow-client", "client_secret": wrong}))
    finally:
        idp.close()
    text = str(caught.value)
    assert "idp_issuer_url" in text and "HTTP 401" in text and "airflow-client" in text, text
    assert wrong not in text and "the-right-secret" not in text
    assert sum(control.stats()["requests"].values()) == 0  # nothing reached Vertex


@pytest.mark.parametrize("extras, message", [
    ({"idp_issuer_url": "https://idp.example/token", "client_id": "c", "client_secret": "s"},
     "missing: credential_config_file"),
    ({"client_id": "c", "client_secret": "s", "credential_config_file": "{}"}, "missing: idp_issuer_url"),
    ({"idp_issuer_url": "https://idp.example/token", "client_secret": "s", "credential_config_file": "{}"},
     "missing: client_id"),
    ({"idp_issuer_url": "http://idp.example/token", "client_id": "c", "client_secret": "s",
      "credential_config_file": "{}"}, "must be an https URL"),
    ({"delegate_to": "someone@example.com"}, "delegate_to look like credentials this hook does not understand"),
    ({"extra__google_cloud_platform__service_account_token": "t"}, "service_account_token look like credentials"),
    ({"idp_extra_params": "{not json"}, "idp_extra_params is not valid JSON"),
])
def test_credential_fields_the_hook_cannot_use_are_an_error_never_adc(extras, message):
    with pytest.raises(ValueError, match=message) as caught:
        ConnectionSettings.from_extras(extras)
    assert "\"s\"" not in str(caught.value) and "'s'" not in str(caught.value)


def test_other_extras_are_not_credentials_and_a_quota_project_is_carried(env, tmp_path):
    """Non-credential extras (the provider's ``num_retries``, a UI's own fields) are ignored;
    ``quota_project_id`` is applied to the credentials as the Google provider does."""
    url, control, tokens = env
    key = _key(f"{url}/token", "source@auth-project.iam.gserviceaccount.com")
    settings = ConnectionSettings.from_extras({"project": PROJECT, "api_endpoint": url, "keyfile_dict": key,
                                               "num_retries": 5, "description": "x", "quota_project_id": "billing-p"})
    credentials, _ = settings.load_credentials()
    assert credentials.quota_project_id == "billing-p"
