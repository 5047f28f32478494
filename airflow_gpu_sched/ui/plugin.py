"""``GpuSchedPlugin``: registered by the ``airflow.plugins`` entry point of the package.

A FastAPI app mounted at ``/gpu-sched`` and three external views into it: a tab on each DAG run
(its training tasks), a tab on each DAG (its last nights) and a "GPU training" entry under Browse
(every DAG's training in the last nights). Airflow loads plugins in every component (workers
too), so this module imports only ``AirflowPlugin``; fastapi and the app are built at the first
request the api-server routes to them.

May import: ui; airflow.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_gpu_sched.ui import PREFIX


class LazyApp:
    """An ASGI app that builds :func:`airflow_gpu_sched.ui.app.create_app` on first use."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if self._app is None:
            from airflow_gpu_sched.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


log = logging.getLogger(__name__)

DISTRIBUTION = "airflow-gpu-sched"


def duplicate_installs(path: list[str] | None = None) -> list[str]:
    """Where ``airflow-gpu-sched`` is installed, if more than once on ``path`` (sys.path by default).

    Twice (e.g. site-packages and a checkout's ``airflow_gpu_sched.egg-info`` on PYTHONPATH) means
    our plugin's entry point twice, and the Task SDK's plugins manager (1.3.2) stops at the second
    instead of skipping it: every plugin listed after it -- the OpenLineage listener's task events
    -- is silently missing in tasks (apache/airflow#72253)."""
    from importlib.metadata import distributions

    where = {} if path is None else {"path": path}
    found = [str(d.locate_file("")) for d in distributions(name=DISTRIBUTION, **where)]
    return found if len(found) > 1 else []


class GpuSchedPlugin(AirflowPlugin):
    name = "airflow_gpu_sched"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": PREFIX, "name": "GPU training timeline"}]
    # hrefs relative to the UI's base URL (the UI fills in {DAG_ID} and {RUN_ID})
    external_views = [
        {"name": "GPU training", "href": "gpu-sched/dags/{DAG_ID}/runs/{RUN_ID}", "destination": "dag_run",
         "url_route": "gpu-training-run"},
        {"name": "GPU training", "href": "gpu-sched/dags/{DAG_ID}", "destination": "dag",
         "url_route": "gpu-training-dag"},
        {"name": "GPU training", "href": "gpu-sched/", "destination": "nav", "category": "browse",
         "url_route": "gpu-training"},
    ]

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        # once per process: say why other plugins' task hooks may be missing (we cannot reorder them)
        if where := duplicate_installs():
            log.warning("%s is installed %d times (%s): Airflow's Task SDK then skips the plugins "
                        "loaded after its second copy in tasks (OpenLineage task events go missing, "
                        "apache/airflow#72253); uninstall one copy or remove the stale *.egg-info",
                        DISTRIBUTION, len(where), ", ".join(where))
