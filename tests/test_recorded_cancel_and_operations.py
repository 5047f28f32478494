"""Two more recordings of real Vertex AI v1 (cloud-custodian's, vendored unmodified: README.md in
tests/data/recorded/cloud_custodian/), and the emulator against each (issue 40):

- a RUNNING batch prediction job cancelled: CANCELLING for about 31 s, then CANCELLED with
  ``error {"code": 1, "message": "CANCELED"}`` and ``endTime`` = ``updateTime``; the list after
  its delete answers ``{}``;
- model uploads' operations polled until done: not done, they carry no ``done`` key and their
  ``genericMetadata.updateTime`` is their ``createTime``; done, ``updateTime`` is the finish.

The emulator has no batch prediction jobs: a cancelled RUNNING custom job (the same JobState
machine, the same cancel) must show the same shape; its operations are persistent resources'.
"""

from __future__ import annotations

from datetime import datetime

import requests

from tests.conftest import LOCATION, PROJECT
from tests.recorded import BATCH_CANCEL_FLIGHT, MODEL_UPLOAD_FLIGHT, flight
from tests.test_emulator import job

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
A100 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_recorded_a_running_job_cancelled_shows_cancelling_then_cancelled():
    calls = flight(BATCH_CANCEL_FLIGHT)
    reads = [(c, j) for c in calls if c.kind == "list" for j in c.jobs()]
    assert [j["state"].removeprefix("JOB_STATE_") for _, j in reads] == [
        "RUNNING", "RUNNING", "CANCELLING", "CANCELLING", "CANCELLING", "CANCELLED", "CANCELLED"]
    (cancel,) = [c for c in calls if c.kind == "cancel"]
    assert cancel.body == {}
    cancelling = [j for _, j in reads if j["state"] == "JOB_STATE_CANCELLING"]
    assert all("endTime" not in j and "error" not in j for j in cancelling)
    began = _instant(cancelling[0]["updateTime"])
    assert 0 <= (began - cancel.date).total_seconds() < 3  # CANCELLING from just after the cancel
    ended = [j for _, j in reads if j["state"] == "JOB_STATE_CANCELLED"][0]
    assert ended["error"] == {"code": 1, "message": "CANCELED"} and ended["endTime"] == ended["updateTime"]
    assert 30 < (_instant(ended["endTime"]) - began).total_seconds() < 32
    assert "startTime" in ended  # kept from its run
    assert calls[-1].kind == "list" and calls[-1].body == {}  # an empty list: {}, no key at all


def test_the_emulator_cancels_a_running_job_in_the_recorded_shape(emulator):
    emulator.reset({"seed": 3, "speed": 1, "cancelSeconds": 31})
    url = f"{emulator.url}/v1/{PARENT}/customJobs"
    name = requests.post(url, json=job(run_seconds=3600), timeout=10).json()["name"]
    emulator.advance(120)
    get = lambda: requests.get(f"{emulator.url}/v1/{name}", timeout=10).json()  # noqa: E731
    running = get()
    assert running["state"] == "JOB_STATE_RUNNING"
    assert requests.post(f"{emulator.url}/v1/{name}:cancel", json={}, timeout=10).json() == {}
    cancelling = get()
    assert cancelling["state"] == "JOB_STATE_CANCELLING"
    assert "endTime" not in cancelling and "error" not in cancelling
    emulator.advance(20)
    assert get()["state"] == "JOB_STATE_CANCELLING"
    emulator.advance(12)
    ended = get()
    assert ended["state"] == "JOB_STATE_CANCELLED"
    assert ended["error"] == {"code": 1, "message": "CANCELED"} and ended["endTime"] == ended["updateTime"]
    assert ended["startTime"] == running["startTime"]
    assert (_instant(ended["endTime"]) - _instant(cancelling["updateTime"])).total_seconds() == 31


def test_recorded_operations_have_no_done_until_done_and_update_time_at_the_finish():
    polls = [c.body for c in flight(MODEL_UPLOAD_FLIGHT) if "-operations-" in c.key]
    waiting, done = [p for p in polls if "done" not in p], [p for p in polls if "done" in p]
    assert len(polls) == 27 and len(waiting) == 25 and all(p["done"] is True for p in done)
    for poll in waiting:
        generic = poll["metadata"]["genericMetadata"]
        assert set(poll) == {"name", "metadata"} and generic["updateTime"] == generic["createTime"]
    for poll in done:
        generic = poll["metadata"]["genericMetadata"]
        assert _instant(generic["updateTime"]) > _instant(generic["createTime"])
    slow = [p for p in done if p["name"] == waiting[0]["name"]][0]["metadata"]["genericMetadata"]
    assert (_instant(slow["updateTime"]) - _instant(slow["createTime"])).total_seconds() > 130


def test_the_emulators_operations_are_shaped_as_recorded(emulator):
    op = requests.post(f"{emulator.url}/v1/{PARENT}/persistentResources", params={"persistentResourceId": "p"},
                       json={"resourcePools": [{"id": "a", "replicaCount": "1", "machineSpec": A100}]},
                       timeout=10).json()
    emulator.advance(30)
    waiting = requests.get(f"{emulator.url}/v1/{op['name']}", timeout=10).json()
    generic = waiting["metadata"]["genericMetadata"]
    assert set(waiting) == {"name", "metadata"} and generic["updateTime"] == generic["createTime"]
    emulator.advance(31)
    done = requests.get(f"{emulator.url}/v1/{op['name']}", timeout=10).json()
    generic = done["metadata"]["genericMetadata"]
    assert done["done"] is True and (_instant(generic["updateTime"]) - _instant(generic["createTime"])).total_seconds() > 59
