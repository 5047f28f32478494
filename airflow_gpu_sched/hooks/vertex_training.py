"""The hook: Vertex AI clients for an Airflow connection, for your own ``@task`` functions.

    from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

    @task
    def running_jobs() -> list[str]:
        with VertexTrainingHook("google_cloud_default").get_client(location="us-central1") as client:
            return [job.name for job in client.list_custom_jobs(filter='state="JOB_STATE_RUNNING"')]

It reads ``google_cloud_platform`` connections (made with the Google provider's form, or ours when
that provider is absent) and ``vertex_gpu_sched`` ones alike: the client reads only the extras,
named as the Google provider names them (connection_form.py). The clients are imported when
asked for, so importing the hook stays cheap.

May import: vertex, hooks; airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_gpu_sched.hooks.connection_form import GOOGLE_CONN_TYPE, OWN_CONN_TYPE

if TYPE_CHECKING:
    from airflow_gpu_sched.vertex.client import AsyncVertexClient, VertexClient

PROBE_LOCATION = "us-central1"  # where the UI's Test button lists jobs when the hook has no location


class VertexTrainingHook(BaseHook):
    """Hands out :class:`~airflow_gpu_sched.vertex.client.VertexClient` (blocking) and
    :class:`~airflow_gpu_sched.vertex.client.AsyncVertexClient` for one connection.

    :param gcp_conn_id: the connection (``google_cloud_platform`` or ``vertex_gpu_sched`` type),
        the operators' ``gcp_conn_id``.
    :param location: the default region of the clients; each ``get_*client`` may override it.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = "google_cloud_default"  # the operators' default: one connection for both
    conn_type = OWN_CONN_TYPE
    hook_name = "Vertex AI GPU training"

    def __init__(self, gcp_conn_id: str = default_conn_name, location: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.gcp_conn_id = gcp_conn_id
        self.location = location

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gcp_conn_id={self.gcp_conn_id!r}, location={self.location!r})"

    def _location(self, location: str | None) -> str:
        location = location or self.location
        if not location:
            raise ValueError(f"{type(self).__name__}: location is required (a Vertex AI region such as "
                             "'us-central1'): pass location= to the hook or to get_client()")
        return location

    def get_conn(self) -> VertexClient:
        """Airflow's hook convention: the blocking client for the hook's location."""
        return self.get_client()

    def get_client(self, location: str | None = None, **kwargs: Any) -> VertexClient:
        """A blocking client; ``kwargs`` go to ``VertexClient`` (``retry``, ``timeout``, ...).
        Close it (``with ... as client``) to release its HTTP session."""
        from airflow_gpu_sched.vertex.client import VertexClient

        return VertexClient.from_connection(self.gcp_conn_id, location=self._location(location), **kwargs)

    def get_async_client(self, location: str | None = None, **kwargs: Any) -> AsyncVertexClient:
        """An async client, the connection read now (blocking): call outside an event loop."""
        from airflow_gpu_sched.vertex.client import AsyncVertexClient

        return AsyncVertexClient.from_connection(self.gcp_conn_id, location=self._location(location), **kwargs)

    async def aget_async_client(self, location: str | None = None, **kwargs: Any) -> AsyncVertexClient:
        """An async client, the connection read without blocking the loop (async tasks, triggers)."""
        from airflow_gpu_sched.vertex.client import AsyncVertexClient

        return await AsyncVertexClient.afrom_connection(self.gcp_conn_id, location=self._location(location),
                                                        **kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's Test button (when ``[core] test_connection`` allows it): list one custom job,
        which checks the endpoint, the credentials and the project's permission at once. One
        attempt, no retries: the form waits for the answer."""
        from airflow_gpu_sched.vertex.client import RetryPolicy

        location = self.location or PROBE_LOCATION
        try:
            with self.get_client(location=location, retry=RetryPolicy(deadline=0), timeout=15) as client:
                client.list_custom_jobs_page(page_size=1)  # one request (list_custom_jobs is lazy)
        except Exception as exc:  # shown in the form; the client's errors carry no credential
            return False, f"{type(exc).__name__}: {exc}"
        return True, f"Listed custom jobs of project {client.project!r} in {location}"


class GoogleCloudConnectionHook(VertexTrainingHook):
    """The same hook under the ``google_cloud_platform`` type: registered (with its form) only
    where the Google provider is not installed, so that ``google_cloud_default`` can be made and
    edited in the UI without it. The Google provider's own ``GoogleBaseHook`` otherwise."""

    conn_type = GOOGLE_CONN_TYPE
    hook_name = "Google Cloud"
