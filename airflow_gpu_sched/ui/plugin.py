"""``GpuSchedPlugin``: registered by the ``airflow.plugins`` entry point of the package.

A FastAPI app mounted at ``/gpu-sched`` and three external views into it: a tab on each DAG run
(its training tasks), a tab on each DAG (its last nights) and a "GPU training" entry under Browse
(every DAG's training in the last nights). Airflow loads plugins in every component (workers
too), so this module imports only ``AirflowPlugin``; fastapi and the app are built at the first
request the api-server routes to them.

May import: ui; airflow.
"""

from __future__ import annotations

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
