"""Callbacks that are Airflow notifiers: the SMTP provider's SmtpNotifier sends to an SMTP
server listening on loopback in the test; a list mixes it with a plain callable."""

from __future__ import annotations

import email
import json
import socketserver
import threading
from datetime import datetime, timezone

import pytest

from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SEEN: list[dict] = []  # what the plain callable got (module level: tasks run in-process)


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP (RFC 5321) for smtplib without TLS: each message's text is kept."""

    def handle(self) -> None:
        def reply(text: str) -> None:
            self.wfile.write(f"{text}\r\n".encode())

        reply("220 localhost test SMTP")
        data, lines = False, []
        while line := self.rfile.readline():
            text = line.decode().rstrip("\r\n")
            if data:
                if text == ".":
                    data = False
                    self.server.messages.append(email.message_from_string("\n".join(lines)))
                    lines = []
                    reply("250 OK: queued")
                else:
                    lines.append(text[1:] if text.startswith("..") else text)
                continue
            verb = text[:4].upper()
            if verb == "EHLO":
                reply("250-localhost")
                reply("250 8BITMIME")
            elif verb == "DATA":
                data = True
                reply("354 End data with <CR><LF>.<CR><LF>")
            elif verb == "QUIT":
                reply("221 Bye")
                return
            else:  # HELO, MAIL, RCPT, RSET, NOOP
                reply("250 OK")


@pytest.fixture
def smtp_server(monkeypatch):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SmtpHandler)
    server.daemon_threads = True
    server.messages = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": server.server_address[1],
        "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 5, "retry_limit": 0}}))
    yield server
    server.shutdown()
    server.server_close()


def test_notifiers_and_callables_get_each_event(airflow_db, fast_emulator, smtp_server):
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    fast_emulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", flex_start=0)
    mail = dict(from_email="airflow@example.com", to="ml-platform@example.com", smtp_conn_id="smtp_test")
    SEEN.clear()
    with DAG("notified", schedule=None, start_date=START) as dag:
        GpuTrainingOperator(
            task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
            machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1,
            poll_interval=0.02, plan=[{"strategy": "FLEX_START", "max_wait_duration": "60s"},
                                      {"strategy": "STANDARD"}],
            on_fallback=[SmtpNotifier(subject="{{ dag.dag_id }}.{{ ti.task_id }} fell back from "
                                              "{{ gpu_sched['from'] }} to {{ gpu_sched['to'] }}",
                                      html_content="{{ gpu_sched.reason }}", **mail),
                         SEEN.append],
            on_capacity_acquired=SmtpNotifier(subject="{{ ti.task_id }}: GPUs on {{ gpu_sched.strategy }} "
                                                      "({{ gpu_sched.event }})", html_content="{{ gpu_sched.job_name }}",
                                              **mail))

    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    subjects = [m["Subject"] for m in smtp_server.messages]
    assert subjects == ["notified.train fell back from FLEX_START to STANDARD",
                        "train: GPUs on STANDARD (capacity_acquired)"]
    assert all(m["To"] == "ml-platform@example.com" for m in smtp_server.messages)
    body = smtp_server.messages[1].get_payload()[0].get_payload(decode=True).decode()
    assert training["job_name"] in body
    assert [(r["from"], r["to"], r["to_location"]) for r in SEEN] == [("FLEX_START", "STANDARD", LOCATION)]
