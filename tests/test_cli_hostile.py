"""The command line against an endpoint that lies (issue 37, part 5): a small local HTTP server
answers the list calls with control characters in every field it can, or with a nextPageToken
that never ends; and the listing's stdout carries the rows only, never a log line."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_gpu_sched.tools.cli import main
from airflow_gpu_sched.tools.exit_codes import API
from airflow_gpu_sched.tools.output import emit, printable
from airflow_gpu_sched.tools.platform import MAX_PAGES
from tests.conftest import LOCATION, PROJECT

REPO = Path(__file__).resolve().parent.parent
HOSTILE = "x\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\x1b[2J\rFORGED\nrow\x9b31m\u202eedoc"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def _job(number: int, text: str) -> dict:
    return {"name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{number}", "displayName": text,
            "state": "JOB_STATE_RUNNING", "createTime": "2026-12-01T00:00:00Z",
            "labels": {"managed-by": "airflow-gpu-sched", "airflow-dag": text, "airflow-task": "t",
                       "airflow-run": text},
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                             "containerSpec": {"imageUri": "gcr.io/p/x"}}]}}


class Hostile:
    """``tokens``: "same" answers one nextPageToken forever, "new" a new one on every page, None none."""

    def __init__(self, tokens: str | None):
        self.tokens, self.requests = tokens, 0
        counter = itertools.count()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                owner.requests += 1
                body: dict = {}
                if "/customJobs" in self.path:
                    body = {"customJobs": [_job(owner.requests, HOSTILE)]}
                    if owner.tokens:
                        body["nextPageToken"] = "again" if owner.tokens == "same" else f"t{next(counter)}"
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile(request):
    server = Hostile(getattr(request, "param", None))
    yield server
    server.close()


def _list(capsys, server: Hostile, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["jobs", "list", "--project", PROJECT, "--location", LOCATION, "--conn-id", "no_such_conn",
                 "--api-endpoint", server.url, "--job-type", "custom_job", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_printable_escapes_c0_del_c1_and_bidi_overrides_and_keeps_the_rest():
    assert printable("ok-name_1 ünï") == "ok-name_1 ünï"
    assert printable("a\x1b[2Jb\r\n\t\x7f\x9b\u202e\u2066") == "a\\x1b[2Jb\\x0d\\x0a\\x09\\x7f\\x9b\\u202e\\u2066"


def test_table_and_plain_print_no_control_character_from_the_endpoint(airflow_db, hostile, capsys):
    for fmt in (["table", "--wide"], ["plain"]):  # every column in full
        code, out, _ = _list(capsys, hostile, "-o", *fmt)
        assert code == 0
        assert not any(c in out for c in RAW), (fmt, out)
        assert len(out.splitlines()) == 2, out  # the header and one row: no forged line
        assert "\\x1b]8;;https://evil.example/\\x07click" in out and "\\x0dFORGED\\x0arow\\x9b31m\\u202eedoc" in out
    code, out, _ = _list(capsys, hostile, "-o", "table")  # the narrow table: escaped first, then cut
    assert code == 0 and not any(c in out for c in RAW), out
    assert len(out.splitlines()) == 2 and max(len(line) for line in out.splitlines()) <= 120, out
    assert "\\x1b" in out.splitlines()[1] or "\\x0d" in out.splitlines()[1], out
    code, out, _ = _list(capsys, hostile, "-o", "json")
    [row] = json.loads(out)
    assert code == 0 and row["dag"] == HOSTILE and "\x1b" not in out  # JSON escapes them itself, the value intact


def test_yaml_quotes_control_characters():
    import io

    import yaml

    out = io.StringIO()
    emit([{"dag": HOSTILE}], ["dag"], "yaml", out)
    assert not any(c in out.getvalue() for c in RAW) and yaml.safe_load(out.getvalue()) == [{"dag": HOSTILE}]


@pytest.mark.parametrize("hostile", ["same"], indirect=True)
def test_a_repeated_page_token_ends_the_listing_with_exit_3(airflow_db, hostile, capsys):
    code, out, err = _list(capsys, hostile)
    assert code == API and out == "" and hostile.requests == 2
    assert err.startswith("error: listing custom_jobs: the endpoint answered a nextPageToken it had given before")


@pytest.mark.parametrize("hostile", ["new"], indirect=True)
def test_a_listing_that_never_ends_stops_at_the_page_cap_with_exit_3(airflow_db, hostile, capsys):
    code, out, err = _list(capsys, hostile)
    assert code == API and out == "" and hostile.requests == MAX_PAGES
    assert f"more than {MAX_PAGES} pages" in err and len(err.splitlines()) == 1


def test_no_log_line_reaches_stdout_ahead_of_json(hostile, tmp_path):
    """A connection whose extra holds a value too short to mask makes Airflow's secrets masker warn
    as the connection is read: the warning came out on stdout, ahead of the JSON."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW_HOME": str(tmp_path),
           "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform", "extra": {
               "project": "p", "api_endpoint": hostile.url}})}
    run = subprocess.run([str(Path(sys.executable).with_name("airflow-gpu-sched")), "jobs", "list", "--location",
                          LOCATION, "--job-type", "custom_job", "-o", "json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)[0]["dag"] == HOSTILE  # all of stdout is the JSON
    assert "Skipping masking" in run.stderr  # the line is still there, on stderr
