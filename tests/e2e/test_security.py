"""Secrets in a deployed Airflow: a planted service-account key and the bearer token it buys
are used for real (the emulator serves https on loopback, so the client loads credentials and
the key's token_uri is the emulator), and never show up in the run's output. The same for an
impersonated account's token (IAM Credentials generateAccessToken stand-in) and for workload
identity federation (a planted config whose subject token the STS stand-in exchanges).

The emulator counts requests that carried the issued token without storing it; the test then
greps everything the run left: every file under AIRFLOW_HOME (task logs, trigger logs, the
components' stdout/stderr), a dump of the metadata database (XCom, task state, trigger rows),
the XCom entries as the REST API serves them, and what the in-process emulator logged.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
import secrets
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl
from tests.e2e.harness import AirflowDeployment, PostgresCluster, _pg_versions, dags_folder, pg_available

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_security"
WIF_AUDIENCE = "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/e2e/providers/ci"
HOP = "hop@e2e-project.iam.gserviceaccount.com"  # as in dags/e2e_security_identities.py
TARGET = "vertex-trainer@e2e-project.iam.gserviceaccount.com"
FAST = {"seed": 1, "speed": 100, "queueSeconds": 1, "provisioningSeconds": 10, "runSeconds": 30}


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _loopback_tls(directory: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (the components trust it via SSL_CERT_FILE and
    REQUESTS_CA_BUNDLE)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = directory / "emulator-cert.pem", directory / "emulator-key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_text(_pem(key))
    return str(certfile), str(keyfile)


class Secrets:
    """The planted secrets and every form of them worth grepping for."""

    def __init__(self, token_uri: str):
        self.private_key = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        self.token = "ya29.e2e-planted-" + secrets.token_urlsafe(32)
        self.impersonated_token = "ya29.e2e-impersonated-" + secrets.token_urlsafe(32)
        self.federated_token = "ya29.e2e-federated-" + secrets.token_urlsafe(32)
        self.subject_token = "eyJ.e2e-subject-" + secrets.token_urlsafe(32)
        self.keyfile = {"type": "service_account", "project_id": "e2e-project",
                        "private_key_id": secrets.token_hex(20), "private_key": self.private_key,
                        "client_email": "trainer@e2e-project.iam.gserviceaccount.com",
                        "client_id": "100000000000000000001", "token_uri": token_uri}

    def needles(self) -> dict[str, str]:
        # each 64-character line of the key's base64 body: a partial or re-encoded leak shows too
        body = [line for line in self.private_key.splitlines() if line and not line.startswith("-----")]
        found = {"bearer token": self.token, "impersonated token": self.impersonated_token,
                 "federated token": self.federated_token, "subject token": self.subject_token}
        found.update({f"private key line {i}": line for i, line in enumerate(body) if len(line) >= 40})
        return found

    def auth(self, **overrides) -> dict:
        """set_auth's arguments: every stand-in hands out its planted token; 401 without one."""
        return {"access_token": self.token, "require_token": True, "impersonated_token": self.impersonated_token,
                "federated_token": self.federated_token, "subject_token": self.subject_token, **overrides}

    def leaks(self, text: str) -> list[str]:
        return [what for what, needle in self.needles().items() if needle in text]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL server tools missing (pg_createcluster): apt-get install -y postgresql")
    root = tmp_path_factory.mktemp("e2e-security")
    dags = dags_folder(root, ("_e2e_task.py", "e2e_security.py", "e2e_security_masking.py",
                              "e2e_security_identities.py"))
    certfile, keyfile = _loopback_tls(root)
    # whatever the in-process emulator (and uvicorn) logs, at every level, goes to this file
    emulator_log = root / "emulator.log"
    handler = logging.FileHandler(emulator_log)
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "airflow_gpu_sched")]
    levels = [lg.level for lg in loggers]
    with EmulatorServer(ssl_certfile=certfile, ssl_keyfile=keyfile) as emulator, PostgresCluster() as pg:
        for lg in loggers:
            lg.addHandler(handler)
            lg.setLevel(logging.DEBUG)
        planted = Secrets(token_uri=f"{emulator.url}/token")
        control = EmulatorControl(emulator.url)
        control._session.verify, control._session.trust_env = certfile, False  # not the env CA bundle
        control.reset(FAST)
        control.set_auth(**planted.auth())  # 401 for a Vertex call without an issued token
        extra = {"project": "e2e-project", "api_endpoint": emulator.url,
                 "keyfile_dict": json.dumps(planted.keyfile)}  # a JSON string, as the Google provider stores it
        # workload identity federation: a config as gcloud writes it, its subject token in a file
        (root / "oidc-token").write_text(planted.subject_token)
        (root / "wif.json").write_text(json.dumps({
            "type": "external_account", "audience": WIF_AUDIENCE, "token_url": f"{emulator.url}/v1/token",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "credential_source": {"file": str(root / "oidc-token")}}))
        wif = {"project": "e2e-project", "api_endpoint": emulator.url, "credential_config_file": str(root / "wif.json")}
        env = {"AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform", "extra": extra}),
               "AIRFLOW_CONN_GCP_WIF": json.dumps({"conn_type": "google_cloud_platform", "extra": wif}),
               "SSL_CERT_FILE": certfile, "REQUESTS_CA_BUNDLE": certfile}
        try:
            with AirflowDeployment(root / "home", pg.url, dags, env) as airflow:
                airflow.emulator, airflow.planted, airflow.pg, airflow.emulator_log = control, planted, pg, emulator_log
                yield airflow
        finally:
            for lg, level in zip(loggers, levels):
                lg.removeHandler(handler)
                lg.setLevel(level)
            handler.close()


def _dump_db(pg: PostgresCluster) -> str:
    pg_dump = Path("/usr/lib/postgresql") / _pg_versions()[-1] / "bin" / "pg_dump"
    proc = subprocess.run([str(pg_dump), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "--data-only",
                           pg.dbname], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _xcoms(airflow: AirflowDeployment, run_id: str, dag_id: str = DAG_ID) -> str:
    out = []
    for ti in airflow.task_instances(dag_id, run_id):
        base = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/xcomEntries"
        for entry in airflow.api("GET", base)["xcom_entries"]:
            out.append(json.dumps(airflow.api("GET", f"{base}/{entry['key']}")))
    return "\n".join(out)


def _task_log(airflow: AirflowDeployment, run_id: str, task_id: str, dag_id: str = DAG_ID) -> str:
    root = airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "".join(p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file())


def _component_log_sizes(airflow: AirflowDeployment) -> dict[Path, int]:
    return {p: p.stat().st_size for p in airflow.log_dir.glob("*.log")}


def _home_files(airflow: AirflowDeployment, since: dict[Path, int]) -> dict[str, str]:
    """Every file under AIRFLOW_HOME; of the append-only component logs, only what was written
    after ``since``; the masking DAG's own task logs left out (that DAG prints the key on purpose)."""
    found = {}
    for path in sorted(p for p in airflow.home.rglob("*") if p.is_file()):
        if f"dag_id={MASKING_DAG}" in str(path):
            continue
        with open(path, "rb") as handle:
            handle.seek(since.get(path, 0))
            found[str(path.relative_to(airflow.home))] = handle.read().decode(errors="replace")
    return found


def test_planted_key_and_token_are_used_but_never_appear_in_the_run_output(secured, capfd):
    """A planted service-account key (the connection's keyfile_dict) and the bearer token it is
    exchanged for reach the emulator (every Vertex call carried the token), and appear nowhere:
    task and trigger logs, component stdout/stderr, metadata DB dump (XCom, task state, triggers),
    XCom via the REST API, the 401 error of a revoked key, the emulator's logs."""
    airflow, planted = secured, secured.planted
    since = _component_log_sizes(airflow)
    airflow.emulator.set_auth(**planted.auth())
    ok_run = airflow.trigger(DAG_ID)
    assert airflow.wait(DAG_ID, ok_run, timeout=180) == "success", airflow.logs()[-20000:]
    stats = airflow.emulator.stats()
    # the credentials were really used: a token was issued and every Vertex call carried it
    assert stats.get("tokensIssued", 0) >= 1 and stats.get("unknownAuthorization", 0) == 0, stats
    assert stats.get("authorizedRequests") == sum(stats["requests"].values()) > 0, stats
    assert stats["jobsCreated"] == {"FLEX_START": 1}

    # an error path: the key is revoked, every Vertex call answers 401; the message must not echo it
    airflow.emulator.set_auth(**planted.auth(require_token=False, reject_tokens=True))
    try:
        failed_run = airflow.trigger(DAG_ID)
        assert airflow.wait(DAG_ID, failed_run, timeout=180) == "failed"
    finally:
        airflow.emulator.set_auth(**planted.auth())
    failure = _task_log(airflow, failed_run, "train")
    assert "UNAUTHENTICATED" in failure and "invalid authentication credentials" in failure, failure[-5000:]

    outputs = {"XCom (REST API)": _xcoms(airflow, ok_run) + _xcoms(airflow, failed_run),
               "metadata DB dump": _dump_db(airflow.pg),
               "emulator log": airflow.emulator_log.read_text(errors="replace"),
               "pytest process output": "".join(capfd.readouterr())}
    outputs.update(_home_files(airflow, since))
    # the grep looked where the secrets would be: the runs' task logs, their XCom, the components
    assert "submitted projects/e2e-project" in _task_log(airflow, ok_run, "train")
    assert "gpu_hours" in outputs["XCom (REST API)"], outputs["XCom (REST API)"][:2000]
    assert "e2e_security" in outputs["metadata DB dump"]
    assert any(name.startswith("component-logs/") and text for name, text in outputs.items())
    leaked = {name: planted.leaks(text) for name, text in outputs.items() if planted.leaks(text)}
    assert not leaked, f"secrets found in: {leaked}"


def test_impersonated_and_federated_identities_are_used_but_never_appear_in_the_run_output(secured, capfd):
    """Two identities other than the key, through a deployed scheduler, worker and triggerer:
    an operator's ``impersonation_chain`` (the key's token buys the target's at the
    generateAccessToken stand-in, through the delegate) and a workload identity federation
    config (the planted subject token is exchanged at the STS stand-in). Every Vertex call, the
    triggerer's polls included, carried the impersonated resp. federated token and no other;
    none of the tokens, nor the key, appears in logs, XCom, the DB dump or errors."""
    airflow, planted = secured, secured.planted
    since = _component_log_sizes(airflow)
    runs = {}
    for dag_id, kind in (("e2e_security_impersonated", "impersonatedRequests"),
                         ("e2e_security_federated", "federatedRequests")):
        airflow.emulator.reset(FAST)
        airflow.emulator.set_auth(**planted.auth())
        runs[dag_id] = run_id = airflow.trigger(dag_id)
        assert airflow.wait(dag_id, run_id, timeout=180) == "success", airflow.logs()[-20000:]
        stats, records = airflow.emulator.stats(), airflow.emulator.auth_records()
        assert stats["jobsCreated"] == {"FLEX_START": 1}, stats
        assert stats.get(kind) == sum(stats["requests"].values()) > 0, stats  # every Vertex call, that token
        others = {"authorizedRequests", "impersonatedRequests", "federatedRequests", "unknownAuthorization"} - {kind}
        assert not any(stats.get(k) for k in others), stats
        if kind == "impersonatedRequests":
            chains = {(r["target"], tuple(r["delegates"]), r["caller"]) for r in records["impersonations"]}
            assert chains == {(TARGET, (f"projects/-/serviceAccounts/{HOP}",), "authorizedRequests")}, records
        else:
            assert records["exchanges"] and all(e["subjectTokenMatched"] and e["audience"] == WIF_AUDIENCE
                                                for e in records["exchanges"]), records
            assert not records["impersonations"] and not records["grants"], records
        log = _task_log(airflow, run_id, "train", dag_id)
        assert "submitted projects/e2e-project" in log, log[-3000:]

    outputs = {"XCom (REST API)": "".join(_xcoms(airflow, run_id, dag_id) for dag_id, run_id in runs.items()),
               "metadata DB dump": _dump_db(airflow.pg),
               "emulator log": airflow.emulator_log.read_text(errors="replace"),
               "pytest process output": "".join(capfd.readouterr())}
    outputs.update(_home_files(airflow, since))
    assert "gpu_hours" in outputs["XCom (REST API)"], outputs["XCom (REST API)"][:2000]
    assert "e2e_security_federated" in outputs["metadata DB dump"]
    leaked = {name: planted.leaks(text) for name, text in outputs.items() if planted.leaks(text)}
    assert not leaked, f"secrets found in: {leaked}"


MASKING_DAG = "e2e_security_masking"


def _masking_run(airflow: AirflowDeployment) -> dict[str, str]:
    """Run the masking DAG once per module; its task log and the scheduler's stdout, by form."""
    if not hasattr(airflow, "masking"):
        since = _component_log_sizes(airflow)
        run_id = airflow.trigger(MASKING_DAG)
        assert airflow.wait(MASKING_DAG, run_id, timeout=180) == "success", airflow.logs()[-20000:]
        scheduler = airflow.log_dir / "scheduler.log"
        with open(scheduler, "rb") as handle:
            handle.seek(since.get(scheduler, 0))
            stdout = handle.read().decode(errors="replace")
        airflow.masking = {"task log": _task_log(airflow, run_id, "show_connection", MASKING_DAG),
                           "scheduler stdout": stdout}
    return airflow.masking


def _line(text: str, form: str) -> str:
    # a logged PEM spans lines in plain-text output: take the text up to the next form tag
    start = text.index(f"[{form}]")
    end = text.find("[", start + len(form) + 2)
    return text[start:end if end != -1 else None]


MASKED_FORMS = ["print-keyfile_dict", "log-keyfile_dict", "structured-extras"]
UNMASKED_FORMS = ["print-extras", "log-private_key"]


@pytest.mark.parametrize("form", MASKED_FORMS)
def test_connection_extras_with_keys_are_masked_in_the_task_log(secured, form):
    """Airflow's secrets masker hides the connection's keyfile_dict (a sensitive field name;
    the connection's extra and its sensitive values are registered when a task reads it):
    printed or logged, the task log shows *** and no part of the key."""
    log = _masking_run(secured)["task log"]
    line = _line(log, form)
    assert "***" in line and not secured.planted.leaks(line), line[:3000]
    if form == "structured-extras":
        assert "e2e-project" in line  # a non-secret extra is still shown


@pytest.mark.xfail(strict=True, reason="Airflow 3.3 masks registered strings, not their repr (a dict "
                                       "printed whole) nor a value parsed out of keyfile_dict")
@pytest.mark.parametrize("form", UNMASKED_FORMS)
def test_known_gap_masker_misses_a_printed_dict_and_a_parsed_private_key(secured, form):
    """Known Airflow gap, kept visible: a task that prints the extras dict whole (its repr
    escapes the key differently) or logs the private_key parsed out of keyfile_dict shows the
    key. Strict xfail: this test starts failing the day Airflow closes the gap."""
    line = _line(_masking_run(secured)["task log"], form)
    assert not secured.planted.leaks(line), line[:3000]


@pytest.mark.xfail(strict=True, reason="Airflow 3.3 LocalExecutor copies task output to the scheduler's "
                                       "stdout (subprocess_logs_to_stdout=True) without masking it")
def test_known_gap_local_executor_copies_task_output_unmasked_to_the_scheduler_stdout(secured):
    """Known Airflow gap: what the task log shows as *** (a printed keyfile_dict) appears in
    clear in the scheduler's stdout, where LocalExecutor echoes task logs."""
    stdout = _masking_run(secured)["scheduler stdout"]
    assert "[print-keyfile_dict]" in stdout, stdout[-3000:]
    assert not secured.planted.leaks(_line(stdout, "print-keyfile_dict"))
