"""Run Airflow 3.3 DAGs in-process (``dag.test()``) on a throwaway SQLite metadata DB.

Airflow reads its config when ``airflow`` is first imported, so the environment must be set
*before* that import happens anywhere in the pytest process. The conftest therefore calls
:func:`set_airflow_env` from ``pytest_configure`` (cheap: env vars only, no airflow import) and
tests that run DAGs request the session fixture :func:`airflow_db`, which creates the schema once.

Usage::

    def test_x(airflow_db):
        result = run_dag(my_dag)
        assert result.state == "success"
        assert result["my_task"].return_value == 42
        assert result["my_task"].try_number == 1
        assert result.task_state_store["my_task"]["job_id"] == "..."

Notes (measured on 3.3.2):
  * ``dag.test()`` refuses DAGs that are not serialized in the DB ("dag is not serialized") unless
    their file is in the DAGs folder, so :func:`run_dag` writes the DAG to the DB first.
  * Every ``dag.test()`` creates a new DagRun; one with the same logical date is deleted first
    (together with its XComs and ``task_state_store`` rows).
  * The first task run in a process costs ~4-5 s (the in-process Execution API builds its
    versioned routes); :func:`warm_up_execution_api` pays it up front. Later runs take ~0.1 s/task.
  * Retries run immediately inside the same ``dag.test()`` when ``retry_delay`` is 0.
  * Deferred tasks: the trigger runs inline (first event only), then ``execute_complete`` runs.
  * ``dag.test()`` has no timeout: a trigger that never yields hangs the test.
  * ``dag.test()`` calls ``asyncio.run`` for triggers: call :func:`run_dag` from sync tests only.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_HOME_MARKER = "AIRFLOW_HARNESS_HOME"  # set by set_airflow_env; tells airflow_db which home is live
_migrated: set[str] = set()


def set_airflow_env(path: str | os.PathLike) -> Path:
    """Point Airflow at a fresh AIRFLOW_HOME under ``path``. Env vars only: does not import airflow.

    Must run before the first ``import airflow`` in the process (e.g. in ``pytest_configure``).
    """
    home = Path(path).resolve()
    if "airflow.configuration" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(home):
        raise RuntimeError(
            "airflow was imported before set_airflow_env(); its config is already loaded. "
            "Call set_airflow_env() from conftest's pytest_configure, before any airflow import."
        )
    (home / "dags").mkdir(parents=True, exist_ok=True)  # kept empty: dag.test() walks it every call
    (home / "plugins").mkdir(exist_ok=True)
    os.environ.update(
        {
            _HOME_MARKER: str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES": "airflow.* tests.* airflow_gpu_sched.*",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            # as a team that runs a triggerer sets it: the operators' deferrable default reads it
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            # many tests call an operator's execute() outside a task runtime, where the default (a
            # Variable read through the Execution API) cannot be read: the option, as a team may set
            # it (tests of the Variable delete it; the deployed tests get the Variable)
            "AIRFLOW__GPU_SCHED__DEPLOYMENT_ID": "tests",
        }
    )
    return home


def configure_airflow_home(path: str | os.PathLike) -> None:
    """Set the env for AIRFLOW_HOME=``path`` and create the DB schema (once per process, ~1 s).

    Uses ``airflow.utils.db.initdb()`` in-process: on an empty DB it creates the tables from the
    ORM and stamps the head revision (~1.1 s vs ~3.4 s for the ``airflow db migrate`` CLI).
    No example DAGs and no default connections are created (3.3 never creates them in initdb).
    """
    home = set_airflow_env(path)
    if str(home) in _migrated:
        return
    from airflow.utils.db import initdb

    initdb()
    _migrated.add(str(home))


def warm_up_execution_api() -> None:
    """Pay the one-off ~4 s start of the in-process Execution API now (first request builds it)."""
    from airflow.sdk.execution_time.supervisor import InProcessTestSupervisor

    InProcessTestSupervisor._api_client().get("health/ping")


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory) -> Path:
    """A migrated SQLite metadata DB for the session; returns AIRFLOW_HOME.

    Reuses the home chosen in ``pytest_configure`` if there is one; otherwise (airflow not yet
    imported) uses a fresh ``tmp_path_factory`` directory.
    """
    home = os.environ.get(_HOME_MARKER) or tmp_path_factory.mktemp("airflow_home")
    configure_airflow_home(home)
    warm_up_execution_api()
    return Path(home)


@dataclass
class TaskResult:
    task_id: str
    map_index: int
    state: str | None
    try_number: int
    xcoms: dict[str, Any] = field(default_factory=dict)

    @property
    def return_value(self) -> Any:
        return self.xcoms.get("return_value")


@dataclass
class DagRunResult:
    dag_id: str
    run_id: str
    state: str
    tasks: dict[tuple[str, int], TaskResult]
    #: task_id (or (task_id, map_index) for mapped tasks) -> {key: value}, read after the run
    task_state_store: dict[Any, dict[str, Any]]

    def __getitem__(self, key: str | tuple[str, int]) -> TaskResult:
        """``result["t"]`` or ``result["t", 2]`` for a mapped task's index 2."""
        return self.tasks[key if isinstance(key, tuple) else (key, -1)]


def sync_dag_to_db(dag) -> None:
    """Serialize ``dag`` into the metadata DB (what the DAG processor does), as dag.test() requires."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


def run_dag(dag, **test_kwargs) -> DagRunResult:
    """``dag.test(**test_kwargs)`` then read back TI states, try numbers, XComs and task state store.

    ``test_kwargs`` go to ``dag.test``: ``logical_date``, ``run_after``, ``run_conf``,
    ``conn_file_path``, ``variable_file_path``, ``mark_success_pattern``.
    """
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    try:  # Airflow 3.3; 3.1 and 3.2 have no task state store (docs/compatibility.md)
        from airflow.models.task_state_store import TaskStateStoreModel
    except ImportError:
        TaskStateStoreModel = None
    try:
        from airflow.sdk.serde import deserialize
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serde import deserialize

    sync_dag_to_db(dag)
    run_id = dag.test(**test_kwargs).run_id
    with create_session() as session:
        dr = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id))
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run_id))
        tasks = {
            (ti.task_id, ti.map_index): TaskResult(ti.task_id, ti.map_index, ti.state and str(ti.state), ti.try_number)
            for ti in tis
        }
        for x in session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag.dag_id)):
            task = tasks.setdefault((x.task_id, x.map_index), TaskResult(x.task_id, x.map_index, None, 0))
            task.xcoms[x.key] = deserialize(XComModel.deserialize_value(x))  # as ti.xcom_pull would
        store: dict[Any, dict[str, Any]] = {}
        rows = [] if TaskStateStoreModel is None else session.scalars(
            select(TaskStateStoreModel).where(TaskStateStoreModel.dag_run_id == dr.id))
        for row in rows:
            key = row.task_id if row.map_index == -1 else (row.task_id, row.map_index)
            store.setdefault(key, {})[row.key] = json.loads(row.value)
        # without a task_state_store (3.1/3.2) the ledger's store is the try's XCom (orchestration/ledger.py)
        from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY

        for (task_id, map_index), task in tasks.items():
            key = task_id if map_index == -1 else (task_id, map_index)
            if LEDGER_KEY in task.xcoms and LEDGER_KEY not in store.get(key, {}):
                store.setdefault(key, {})[LEDGER_KEY] = task.xcoms[LEDGER_KEY]
        return DagRunResult(dag.dag_id, run_id, str(dr.state), tasks, store)


def set_connection_env(monkeypatch, conn_id: str, conn_type: str, extra: dict | None = None, **fields) -> None:
    """Define a connection as ``AIRFLOW_CONN_<CONN_ID>`` JSON (the form ``Connection.from_json`` reads).

    ``fields`` may be host, login, password, schema, port. Visible to ``BaseHook.get_connection``
    in tasks and ``await BaseHook.aget_connection`` in triggers under ``dag.test()``.
    """
    body = {"conn_type": conn_type, **fields, "extra": extra or {}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))
