"""Extra links per job type after a ``dag.test()`` run, read the way Airflow's API server reads
them: the serialized DAG from the metadata DB, ``task.get_extra_links(ti, name)``."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT, with_a100_pool
from tests.test_operator_job_types import START, _operator

CONSOLE = "https://console.cloud.google.com"
NAMES = ("Vertex AI Custom Job", "Vertex AI Tuning Job", "Vertex AI Training Pipeline", "Vertex AI Model",
         "Vertex AI Persistent Resource", "Training Logs")


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    fast_emulator.reset(with_a100_pool("pool-a", replicas=2))
    return fast_emulator


def _links(dag_id: str, run_id: str) -> dict[str, str]:
    from sqlalchemy import select

    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        task = SerializedDagModel.get_dag(dag_id, session=session).get_task("train")
        ti = session.scalar(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id))
        return {name: task.get_extra_links(ti, name) for name in NAMES}


@pytest.mark.parametrize("strategy, job_type", [("PERSISTENT_RESOURCE", "custom_job"),
                                                ("SPOT", "hyperparameter_tuning_job"),
                                                ("SPOT", "training_pipeline")])
def test_each_job_type_has_its_links(airflow, strategy, job_type):
    from airflow.sdk import DAG

    with DAG(f"links_{job_type}", schedule=None, start_date=START) as dag:
        _operator(strategy, job_type)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    training = result["train"].return_value
    job_id = training["job_name"].rsplit("/", 1)[1]
    links = _links(dag.dag_id, result.run_id)
    where = f"{CONSOLE}/vertex-ai/locations/{LOCATION}/training/{job_id}"
    expected = {
        "custom_job": {"Vertex AI Custom Job": f"{where}/cpu?project={PROJECT}"},
        "hyperparameter_tuning_job": {"Vertex AI Tuning Job": f"{where}/trials?project={PROJECT}"},
        "training_pipeline": {"Vertex AI Training Pipeline": f"{where}?project={PROJECT}"},
    }[job_type]
    if strategy == "PERSISTENT_RESOURCE":
        expected["Vertex AI Persistent Resource"] = (f"{CONSOLE}/vertex-ai/locations/{LOCATION}/persistent-resources/"
                                                     f"pool-a?project={PROJECT}")
    if job_type == "training_pipeline":
        model_id = training["model_name"].split("@")[0].rsplit("/", 1)[1]
        expected["Vertex AI Model"] = (f"{CONSOLE}/vertex-ai/models/locations/{LOCATION}/models/{model_id}/versions/"
                                       f"{training['model_version'] or 'default'}/properties?project={PROJECT}")
    logs = links.pop("Training Logs")
    assert logs.startswith(f"{CONSOLE}/logs/query;query=") and logs.endswith(f"?project={PROJECT}")
    assert unquote(logs) .split(";query=")[1].split("?project=")[0] == (
        f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"')
    # every other link of the task is empty (Airflow shows it disabled): not this job's type
    assert links == {name: expected.get(name, "") for name in links}
