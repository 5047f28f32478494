"""One strict resource-name pattern, checked before a name from outside (an API answer, the
ledger, XCom) goes into a URL: a traversal to another project or a garbled name is a clear
ValueError naming the rule, and no request is sent (the emulator's traffic says so)."""

from __future__ import annotations

import pytest

from airflow_gpu_sched.orchestration.job_types import job_type_of
from airflow_gpu_sched.vertex.client import VertexClient
from airflow_gpu_sched.vertex.resource_names import check_path, parts
from tests.conftest import LOCATION, PROJECT

HOSTILE = [
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/../../../q/locations/l/customJobs/9",
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1%2F..%2F..",
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1?alt=media",
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1#x",
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs//1",
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/",
    "projects/x",
    "garbled",
    "",
    f"projects/{PROJECT}/locations/US Central/customJobs/1",
]


@pytest.mark.parametrize("name", [n for n in HOSTILE if n.startswith("projects/")])  # a bare id is the client's own
def test_a_hostile_or_garbled_name_is_refused_before_any_request(fast_emulator, name):
    fast_emulator.start_traffic()
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=fast_emulator.url) as client:
        for call in (client.get_custom_job, client.cancel_custom_job):
            with pytest.raises(ValueError, match="is not a Vertex AI .*(COLLECTION/ID|refused before any request)"):
                call(name)
    assert fast_emulator.traffic() == []


@pytest.mark.parametrize("name", HOSTILE + [f"projects/{PROJECT}/locations/{LOCATION}/customJobs/1/operations/2"])
def test_the_operators_name_readers_refuse_it_with_a_value_error_not_an_index_error(name):
    with pytest.raises(ValueError, match="is not a"):
        job_type_of(name)


@pytest.mark.parametrize("name", [
    f"projects/{PROJECT}/locations/{LOCATION}/customJobs/123",
    "projects/123456789/locations/global/trainingPipelines/42",
    "projects/example.com:my-project/locations/europe-west4/hyperparameterTuningJobs/7",
    f"projects/{PROJECT}/locations/{LOCATION}/persistentResources/pool-a",
    f"projects/{PROJECT}/locations/{LOCATION}/models/12@3",
])
def test_real_names_pass(name):
    check_path(name)
    assert parts(name)[1] in (LOCATION, "global", "europe-west4")


def test_on_kill_with_a_traversal_name_cancels_nothing_and_says_why(fast_emulator):
    """The operator's kill path reads the name it kept (from the ledger/XCom on a retry)."""
    from airflow_gpu_sched.operators import SpotTrainingOperator

    op = SpotTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                              machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
                              accelerator_count=1)
    op.running_job = HOSTILE[0]
    fast_emulator.start_traffic()
    with pytest.raises(ValueError, match="is not a Vertex AI training resource name"):
        op.on_kill()
    assert fast_emulator.traffic() == []
