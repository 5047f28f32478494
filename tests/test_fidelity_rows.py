"""The smaller fidelity rows of issue 21 item 6, each as the emulator and the rules model it
(docs/fidelity.md cites the source of each)."""

from __future__ import annotations

import pytest
import requests

from tests.conftest import LOCATION, PROJECT
from tests.test_emulator import job

from airflow_gpu_sched.vertex.models import PersistentResource
from airflow_gpu_sched.vertex.persistent_rules import check_persistent_resource

ROOT = f"projects/{PROJECT}/locations/{LOCATION}"


def test_a_failed_jobs_message_goes_on_with_the_console_logs_url(emulator):
    created = requests.post(f"{emulator.url}/v1/{ROOT}/customJobs", json=job(run_seconds=5, exit_code=3),
                            timeout=10).json()
    emulator.advance(120)
    ended = requests.get(f"{emulator.url}/v1/{created['name']}", timeout=10).json()
    job_id = created["name"].rsplit("/", 1)[1]
    assert ended["state"] == "JOB_STATE_FAILED"
    message = ended["error"]["message"]
    assert message.startswith("The replica workerpool0-0 exited with a non-zero status of 3. "
                              "To find out more about why your job exited please check the logs: ")
    assert message.endswith(f"https://console.cloud.google.com/logs/viewer?project={PROJECT}"
                            f"&resource=ml_job%2Fjob_id%2F{job_id}&advancedFilter=resource.type%3D%22ml_job%22"
                            f"%0Aresource.labels.job_id%3D%22{job_id}%22")


def _resource(replicas: int, low: int | None, high: int | None) -> PersistentResource:
    spec = {k: v for k, v in (("minReplicaCount", low), ("maxReplicaCount", high)) if v is not None}
    return PersistentResource.model_validate({"resourcePools": [{
        "id": "a100s", "replicaCount": str(replicas), "autoscalingSpec": spec,
        "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                        "acceleratorCount": 1}}]})


@pytest.mark.parametrize(("replicas", "low", "high", "field", "words"), [
    (2, 0, 4, "minReplicaCount", "at least 1"),
    (2, 3, 4, "minReplicaCount", "must not exceed replicaCount"),
    (2, None, 1, "maxReplicaCount", "must be at least replicaCount"),
    (2, 2, 2, "maxReplicaCount", "greater than minReplicaCount"),
])
def test_autoscaling_bounds_of_a_persistent_resource_are_refused_naming_the_field(replicas, low, high, field,
                                                                                   words):
    found = check_persistent_resource(_resource(replicas, low, high), "pool-a")
    assert [(v.path, words in v.rule) for v in found] == \
        [(f"resourcePools[0].autoscalingSpec.{field}", True)]


@pytest.mark.parametrize(("low", "high"), [(1, 4), (2, 3), (None, 4), (1, None)])
def test_autoscaling_bounds_within_the_proto_rules_pass(low, high):
    assert check_persistent_resource(_resource(2, low, high), "pool-a") == []


def test_the_emulator_refuses_bad_autoscaling_bounds_with_a_400(emulator):
    body = {"resourcePools": [{"id": "a100s", "replicaCount": "2", "autoscalingSpec": {
        "minReplicaCount": "3", "maxReplicaCount": "4"}, "machineSpec": {
        "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}]}
    response = requests.post(f"{emulator.url}/v1/{ROOT}/persistentResources",
                             params={"persistentResourceId": "pool-a"}, json=body, timeout=10)
    assert response.status_code == 400
    assert "resourcePools[0].autoscalingSpec.minReplicaCount" in response.json()["error"]["message"]


def test_a_reservation_with_local_ssds_cannot_be_consumed():
    from airflow_gpu_sched.vertex.models import CustomJobSpec
    from airflow_gpu_sched.vertex.reservations import Reservation, fit

    spec = CustomJobSpec.model_validate(job()["jobSpec"])
    props = {"machineType": "a2-highgpu-1g", "guestAccelerators": [
        {"acceleratorType": "nvidia-tesla-a100", "acceleratorCount": 1}]}
    plain = {"name": "r", "status": "READY", "specificReservation": {"count": "2", "inUseCount": "0",
                                                                      "instanceProperties": props}}
    assert fit(spec, Reservation.model_validate(plain)).problems == ()
    with_ssd = {**plain, "specificReservation": {**plain["specificReservation"], "instanceProperties": {
        **props, "localSsds": [{"diskSizeGb": "375", "interface": "NVME"}]}}}
    assert [p for p in fit(spec, Reservation.model_validate(with_ssd)).problems if "Local SSD" in p]


# ------------------------------------------------------------------ the counts at the top of docs/fidelity.md

FIDELITY = __import__("pathlib").Path(__file__).parent.parent / "docs" / "fidelity.md"
CLASSES = ("recorded", "documented", "observed", "assumed", "emulator-only")


def _rows_by_class(text: str) -> dict[str, list[str]]:
    """Each table row (behaviour, emulator, evidence, operator) under the first class its evidence
    cell names, as the page says it counts them."""
    import re

    found: dict[str, list[str]] = {c: [] for c in CLASSES}
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[2].lower() in ("evidence", "source"):  # a table's header
            continue
        first = re.match(r"\**([a-z-]+)", cells[2].lower())
        assert first and first.group(1) in CLASSES, f"row {cells[0]!r}: evidence must start with a class: {cells[2]!r}"
        found[first.group(1)].append(cells[0])
    return found


def test_the_counts_by_class_at_the_top_match_the_rows():
    import re

    text = FIDELITY.read_text(encoding="utf-8")
    rows = _rows_by_class(text)
    stated = re.search(r"\*\*Rows by evidence class\*\*.*?\((\d+) rows\)", text, re.S)
    assert stated, "docs/fidelity.md: the counts by class at the top are missing"
    line = stated.group(0)
    counts = {c: int(re.search(rf"{c} (\d+)", line).group(1)) for c in CLASSES}
    assert counts == {c: len(r) for c, r in rows.items()}
    assert int(stated.group(1)) == sum(counts.values())
    assert counts["recorded"] >= 14  # the batch-prediction cancel and the operations moved in (issue 40)
