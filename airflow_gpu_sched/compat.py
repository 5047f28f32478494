"""The one place that knows Airflow versions (docs/compatibility.md): the names that moved
between 3.1, 3.2 and 3.3, and what a version can do, as named capabilities.

Moved names: ``from airflow_gpu_sched import compat`` then ``compat.conf``,
``compat.AirflowFailException``... Each is looked up when read (the newest home first, then the
older ones), never bound here at import: a test that patches the name in Airflow's module (e.g.
``airflow.sdk.log.mask_secret``) is seen, and importing this module imports no Airflow.

Capabilities (``compat.HAS_TASK_STATE_STORE``...) are worked out at their first read, from what
the installed Airflow has (a feature, not a version number, where one can be seen cheaply):

- ``HAS_TASK_STATE_STORE``: the task's context has ``task_state_store`` (3.3), a store kept
  across tries. Without it the ledger lives in the try's own XCom (orchestration/ledger.py):
  kept across the deferral, cleared by Airflow when a retry starts; a retry finds its job by
  its labels on Vertex instead (operators/reattach.py).
- ``TRIGGERS_GET_ON_KILL``: the triggerer calls ``BaseTrigger.on_kill`` when a user marks a
  deferred task failed or clears it (3.3). Without it the reaper cancels the job
  (triggers/reaper.py, docs/reaper.md).
- ``PROVIDER_CLI``: the provider-info ``cli`` key is read, so ``airflow gpu-sched`` exists (3.2).
  Without it the same commands are ``airflow-gpu-sched`` (the console script).

Calls whose shape moved: :func:`xcom_aset` / :func:`xcom_aget_one` (a trigger's XComs: 3.1 and
3.2 have no async XCom API, their triggerer's channel takes the same messages) and
:func:`dag_bag` (3.1's and 3.2's ``DagBag`` would add Airflow's example DAGs).

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

# name -> its homes, the newest first ("module:attribute")
MOVED: dict[str, tuple[str, ...]] = {
    "conf": ("airflow.sdk.configuration:conf", "airflow.configuration:conf"),
    "AirflowException": ("airflow.sdk.exceptions:AirflowException", "airflow.exceptions:AirflowException"),
    "AirflowFailException": ("airflow.sdk.exceptions:AirflowFailException",
                             "airflow.exceptions:AirflowFailException"),
    "AirflowTaskTerminated": ("airflow.sdk.exceptions:AirflowTaskTerminated",
                              "airflow.exceptions:AirflowTaskTerminated"),
    "AirflowNotFoundException": ("airflow.sdk.exceptions:AirflowNotFoundException",
                                 "airflow.exceptions:AirflowNotFoundException"),
    "DagBag": ("airflow.dag_processing.dagbag:DagBag", "airflow.models.dagbag:DagBag"),
    # the public face of metrics (airflow.stats is a deprecated shim where both exist)
    "stats": ("airflow.sdk.observability:stats", "airflow.stats:Stats"),
    "mask_secret": ("airflow.sdk.log:mask_secret",),
    # 3.1 has no async masker: compat._amask_here registers with this process's masker
    "amask_secret": ("airflow.sdk.log:amask_secret", "airflow_gpu_sched.compat:_amask_here"),
    # the task_state_store's retention (3.3); None where there is no store
    "NEVER_EXPIRE": ("airflow.sdk.execution_time.context:NEVER_EXPIRE",),
}

CAPABILITIES = ("HAS_TASK_STATE_STORE", "TRIGGERS_GET_ON_KILL", "PROVIDER_CLI")


@lru_cache(maxsize=None)
def _home(name: str) -> tuple[str, str] | None:
    """The first home of ``name`` that this Airflow has (module, attribute), or None."""
    for home in MOVED[name]:
        module_name, attr = home.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, attr):
            return module_name, attr
    return None


def resolve(name: str, default: Any = ...) -> Any:
    """The moved ``name`` as this Airflow has it now (read at each call); ``default`` when no
    home has it (without a default: ImportError naming every home tried)."""
    home = _home(name)
    if home is None:
        if default is not ...:
            return default
        raise ImportError(f"{name} not found in this Airflow (tried {', '.join(MOVED[name])})")
    return getattr(importlib.import_module(home[0]), home[1])


async def _amask_here(secret: Any, name: str | None = None) -> None:
    """Airflow 3.1: the secret registered with this process's masker (where the trigger's log
    lines are written); the supervisor is not told (3.1 has no async channel for it)."""
    from airflow.sdk._shared.secrets_masker import _secrets_masker

    _secrets_masker().add_mask(secret, name)


def _airflow_at_least(major: int, minor: int) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("apache-airflow-core")
    except PackageNotFoundError:
        return False
    parts = [int(p) for p in text.split(".")[:2] if p.isdigit()]
    return tuple(parts) >= (major, minor)


@lru_cache(maxsize=None)
def capability(name: str) -> bool:
    """A named capability of the installed Airflow (see the module doc)."""
    if name == "HAS_TASK_STATE_STORE":
        return _home("NEVER_EXPIRE") is not None
    if name == "TRIGGERS_GET_ON_KILL":
        from airflow.triggers.base import BaseTrigger

        return callable(getattr(BaseTrigger, "on_kill", None))
    if name == "PROVIDER_CLI":  # nothing cheap to look at: providers_manager reads the key
        return _airflow_at_least(3, 2)
    raise AttributeError(name)


def __getattr__(name: str) -> Any:
    if name in CAPABILITIES:
        return capability(name)
    if name in MOVED:
        return resolve(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def xcom_aset(key: str, value: Any, *, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> None:
    """An XCom of a task instance written from a trigger (the triggerer's channel): ``XCom.aset``
    (3.3), else the message it sends, which 3.1's and 3.2's triggerer supervisors take too."""
    from airflow.sdk.execution_time.xcom import XCom

    where = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": map_index}
    if hasattr(XCom, "aset"):
        await XCom.aset(key, value, **where)
        return
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import SetXCom

    wire = XCom.serialize_value(value=value, key=key, **where)
    await task_runner.SUPERVISOR_COMMS.asend(SetXCom(key=key, value=wire, **where))


async def xcom_aget_one(*, key: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> Any:
    """An XCom of a task instance read from a trigger: ``XCom.aget_one`` (3.3), else its message."""
    from airflow.sdk.execution_time.xcom import XCom

    where = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": map_index}
    if hasattr(XCom, "aget_one"):
        return await XCom.aget_one(key=key, **where)
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetXCom, XComResult

    found = await task_runner.SUPERVISOR_COMMS.asend(GetXCom(key=key, **where))
    if not isinstance(found, XComResult) or found.value is None:
        return None
    return XCom.deserialize_value(found)


def dag_bag(dag_folder: str, **kwargs: Any) -> Any:
    """A ``DagBag`` of ``dag_folder`` alone: 3.1's and 3.2's also load Airflow's example DAGs
    when ``[core] load_examples`` is on unless told not to (3.3's takes no such argument)."""
    import inspect

    bag = resolve("DagBag")
    if "include_examples" in inspect.signature(bag.__init__).parameters:
        kwargs.setdefault("include_examples", False)
    return bag(dag_folder=dag_folder, **kwargs)


def summary() -> dict[str, bool]:
    """Every capability of this Airflow (for `airflow-gpu-sched` and the docs' table)."""
    return {name: capability(name) for name in CAPABILITIES}
