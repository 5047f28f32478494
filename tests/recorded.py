"""The vendored recordings of real Vertex AI v1 traffic (tests/data/recorded/), and a replay server.

A flight is one directory of cloud-custodian's recorder: one JSON file per HTTP call, named
``<method><path with / and : as ->_<n>.json`` (``n`` counts the calls with that method and path),
holding ``{"headers": {..., "status": "200"}, "body": {...}}`` (README.md there).

:class:`ReplayServer` is a real HTTP server (stdlib) that answers each request with the next
recorded file for its method and path, as cloud-custodian's own ``HttpReplay`` does, so our
clients are tested at the wire against answers no one here wrote. A request with no recording
left is answered 599 and noted in ``misses``; every served file is noted in ``served``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RECORDED = Path(__file__).parent / "data" / "recorded" / "cloud_custodian"
CUSTOM_FLIGHTS = ("vertexai_custom_job_query", "vertexai_custom_job_cancel_and_delete",
                  "vertexai_custom_job_field_filters")
TUNING_FLIGHTS = ("vertexai_hp_tuning_job_query", "vertexai_hp_tuning_job_cancel_and_delete",
                  "vertexai_hp_tuning_job_field_filters")
FLIGHTS = CUSTOM_FLIGHTS + TUNING_FLIGHTS
# Recorded besides (issue 40), vendored from the same snapshot: a RUNNING batch prediction job
# cancelled (CANCELLING, then CANCELLED), and model uploads whose operations were polled until done.
BATCH_CANCEL_FLIGHT = "vertexai-batch-prediction-job-stop-and-delete"
MODEL_UPLOAD_FLIGHT = "vertexai-model-multi-location"
_COLLECTIONS = ("customJobs", "hyperparameterTuningJobs", "batchPredictionJobs")
# The request bodies are not recorded; these are cloud-custodian's (tools/c7n_gcp/tests/
# test_vertexai.py, create_custom_job / create_hp_job): no diskSpec, replicaCount a number.
CREATE_POOL = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
               "containerSpec": {"imageUri": "gcr.io/google.com/cloudsdktool/cloud-sdk:slim",
                                 "command": ["sleep"], "args": ["120"]}}
CUSTOM_CREATE = {"displayName": "c7n-test-custom-job", "jobSpec": {"workerPoolSpecs": [CREATE_POOL]}}
TUNING_CREATE = {"displayName": "c7n-test-hp-job", "studySpec": {
    "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
    "parameters": [{"parameterId": "lr", "discreteValueSpec": {"values": [0.1, 0.2]}}]},
    "maxTrialCount": 1, "parallelTrialCount": 1, "trialJobSpec": {"workerPoolSpecs": [CREATE_POOL]}}

_FILE = re.compile(r"^(get|post|delete|patch)-(.+)_(\d+)\.json$")
# The order of calls within one second (the date header's resolution), as the recording test
# makes them: create, list, cancel, get, delete.
_RANK = {"create": 0, "list": 1, "cancel": 2, "get": 3, "delete": 4}


@dataclass(frozen=True)
class Call:
    """One recorded call."""

    path: Path
    method: str  # "GET", "POST", "DELETE"
    key: str  # the recorder's key: method + path with / and : as -
    index: int
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def date(self) -> datetime:
        return parsedate_to_datetime(self.headers["date"]).astimezone(timezone.utc)

    @property
    def kind(self) -> str:
        """create, list, get, cancel or delete."""
        collection = self.key.endswith(_COLLECTIONS + ("-models",))
        if self.method == "DELETE":
            return "delete"
        if self.method == "POST":
            return "create" if collection or self.key.endswith("models-upload") else "cancel"
        return "list" if collection else "get"

    @property
    def collection(self) -> str:
        return next((c for c in _COLLECTIONS[1:] if c in self.key), "customJobs")

    def jobs(self) -> list[dict]:
        """The job bodies this call answered (a list's items, a create's or a get's job)."""
        if self.status != 200:
            return []
        if self.kind == "list":
            return list(self.body.get(self.collection, []))
        return [self.body] if self.kind in ("create", "get") else []


def flight(name: str) -> list[Call]:
    """The calls of one flight, in the order they were made."""
    calls = []
    for path in (RECORDED / name).glob("*.json"):
        match = _FILE.match(path.name)
        assert match, path
        data = json.loads(path.read_text())
        headers = data["headers"]
        calls.append(Call(path=path, method=match[1].upper(), key=f"{match[1]}-{match[2]}", index=int(match[3]),
                          status=int(headers["status"]), headers=headers, body=data["body"]))
    # a 404 (of the deleted job) comes after the delete of the same second
    return sorted(calls, key=lambda c: (c.date, c.status == 404, _RANK[c.kind], c.index))


def request_key(method: str, path: str) -> str:
    """cloud-custodian's key for a request (recorder.py ``get_next_file_path``)."""
    path = urlsplit(path).path
    return method.lower() + path.replace("/", "-").replace(":", "-")


class ReplayServer:
    """Serves one flight's files by method and path, each key's files in their recorded order."""

    def __init__(self, name: str):
        self.calls = flight(name)
        self._queues: dict[str, list[Call]] = {}
        for call in sorted(self.calls, key=lambda c: c.index):
            self._queues.setdefault(call.key, []).append(call)
        self.served: list[Call] = []
        self.misses: list[str] = []
        self.requests: list[tuple[str, str, bytes]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append((self.command, self.path, body))
                    queue = server._queues.get(request_key(self.command, self.path), [])
                    call = queue.pop(0) if queue else None
                    if call is None:
                        server.misses.append(f"{self.command} {self.path}")
                    else:
                        server.served.append(call)
                if call is None:
                    status, payload, ctype = 599, b'{"error": "no recording left"}', "application/json"
                else:
                    status, ctype = call.status, call.headers.get("content-type", "application/json")
                    payload = json.dumps(call.body).encode() + b"\n"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = do_PATCH = _answer

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def unserved(self) -> list[str]:
        return [c.path.name for queue in self._queues.values() for c in queue]
