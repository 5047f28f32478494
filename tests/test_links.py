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


# ---------------------------------------------------------------------- only the console's host

def _pushes_links_operator():
    """A task that writes the XComs the links read, as anyone who can write a task's XCom could;
    Airflow then computes each link at the end of the task (its ``_link_*`` XComs) with our classes."""
    from airflow.sdk import BaseOperator

    from airflow_gpu_sched.operators.base import VertexCustomJobLink
    from airflow_gpu_sched.operators.links import LINKS

    class PushesLinks(BaseOperator):
        operator_extra_links = (VertexCustomJobLink(), *LINKS)

        def __init__(self, links, result, **kwargs):
            super().__init__(**kwargs)
            self.links, self.result = links, result

        def execute(self, context):
            context["ti"].xcom_push(key="console_links", value=self.links)
            return self.result

    return PushesLinks


HOSTILE = {"training_pipeline": "javascript:alert(document.cookie)",
           "logs": "https://evil.example/console.cloud.google.com/logs",
           "tuning_job": "http://console.cloud.google.com/vertex-ai",  # not https
           "persistent_resource": "https://console.cloud.google.com@evil.example/x",  # a user part
           "custom_job": "https://console.cloud.google.com:444/x"}  # another port


@pytest.mark.parametrize("links, result", [
    (HOSTILE, {"model_name": "projects/p/../../x/models"}),  # and a garbled model name
    (["not", "a", "dict"], {"model_name": "javascript:alert(1)"}),
])
def test_an_xcom_link_off_the_console_host_is_no_link(airflow_db, links, result):
    from airflow.sdk import DAG

    dag_id = f"links_hostile_{type(links).__name__}"
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        _pushes_links_operator()(task_id="train", links=links, result=result)
    run = run_dag(dag, logical_date=START)
    assert run.state == "success"
    assert _links(dag_id, run.run_id) == dict.fromkeys(NAMES, "")  # each refused: Airflow shows no link


def test_a_link_on_the_console_host_is_kept(airflow_db):
    from airflow.sdk import DAG

    good = f"{CONSOLE}/vertex-ai/locations/{LOCATION}/training/1/cpu?project={PROJECT}"
    with DAG("links_kept", schedule=None, start_date=START) as dag:
        _pushes_links_operator()(task_id="train", links={"custom_job": good}, result=None)
    run = run_dag(dag, logical_date=START)
    assert _links("links_kept", run.run_id)["Vertex AI Custom Job"] == good


def test_links_follow_the_configured_console_domain(airflow, monkeypatch):
    from airflow.sdk import DAG

    from airflow_gpu_sched.vertex.console import ConsoleDomainError, check_domain

    monkeypatch.setenv("AIRFLOW__GPU_SCHED__CONSOLE_DOMAIN", "console.cloud.example-universe.goog")
    with DAG("links_universe", schedule=None, start_date=START) as dag:
        _operator("SPOT", "custom_job")
    result = run_dag(dag, logical_date=START)
    assert result.state == "success"
    links = _links(dag.dag_id, result.run_id)
    assert links["Vertex AI Custom Job"].startswith("https://console.cloud.example-universe.goog/vertex-ai/")
    assert links["Training Logs"].startswith("https://console.cloud.example-universe.goog/logs/")
    assert result["train"].return_value["console_url"].startswith("https://console.cloud.example-universe.goog/")

    for bad in ("https://console.cloud.google.com", "console.cloud.google.com:443", "evil.example/x", ""):
        with pytest.raises(ConsoleDomainError, match=r"\[gpu_sched\] console_domain"):
            check_domain(bad)
