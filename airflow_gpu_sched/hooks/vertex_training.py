"""The hook: Vertex AI clients for an Airflow connection, for your own ``@task`` functions.

    from airflow_gpu_sched.hooks.vertex_training import VertexTrainingHook

    @task
    def running_jobs() -> list[str]:
        with VertexTrainingHook(gcp_conn_id="google_cloud_default").get_client(location="us-central1") as client:
            return [job.name for job in client.list_custom_jobs(filter='state="JOB_STATE_RUNNING"')]

It reads ``google_cloud_platform`` connections (made with the Google provider's form, or ours when
that provider is absent) and ``vertex_gpu_sched`` ones alike: the client reads only the extras,
named as the Google provider names them (connection_form.py). The clients are imported when
asked for, so importing the hook stays cheap.

Its surface is the Google provider's ``GoogleBaseHook``'s, for people who know that one:
``VertexTrainingHook(gcp_conn_id=..., impersonation_chain=...)``, ``get_credentials()``,
``get_credentials_and_project_id()``, ``project_id`` and ``get_conn()``. Where the credentials
come from is decided in one place, ``vertex/client/auth.py`` (``ConnectionSettings``): the hook
only asks it.

May import: vertex, hooks; airflow.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_gpu_sched.hooks.connection_form import GOOGLE_CONN_TYPE, OWN_CONN_TYPE

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

    from airflow_gpu_sched.vertex.client import AsyncVertexClient, VertexClient
    from airflow_gpu_sched.vertex.client.auth import ConnectionSettings

PROBE_LOCATION = "us-central1"  # where the UI's Test button lists jobs when the hook has no location


class VertexTrainingHook(BaseHook):
    """Hands out :class:`~airflow_gpu_sched.vertex.client.VertexClient` (blocking) and
    :class:`~airflow_gpu_sched.vertex.client.AsyncVertexClient` for one connection.

    :param gcp_conn_id: the connection (``google_cloud_platform`` or ``vertex_gpu_sched`` type),
        the operators' ``gcp_conn_id``.
    :param impersonation_chain: a service account to impersonate, or a chain of them (a list, or
        one comma-separated string; the last one acts), as ``GoogleBaseHook`` takes it. Wins over
        the connection's ``impersonation_chain``.
    :param location: the default region of the clients; each ``get_*client`` may override it.

    The connection is read when first needed (not in ``__init__``), so making a hook is free.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = "google_cloud_default"  # the operators' default: one connection for both
    conn_type = OWN_CONN_TYPE
    hook_name = "Vertex AI GPU training"

    def __init__(self, gcp_conn_id: str = default_conn_name, impersonation_chain: str | Sequence[str] | None = None,
                 *, location: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.location = location

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gcp_conn_id={self.gcp_conn_id!r}, location={self.location!r})"

    def _location(self, location: str | None) -> str:
        location = location or self.location
        if not location:
            raise ValueError(f"{type(self).__name__}: location is required (a Vertex AI region such as "
                             "'us-central1'): pass location= to the hook or to get_client()")
        return location

    @functools.cached_property
    def _settings(self) -> ConnectionSettings:
        from airflow_gpu_sched.vertex.client.auth import ConnectionSettings

        return ConnectionSettings.from_airflow(self.gcp_conn_id).with_overrides(
            impersonation_chain=self.impersonation_chain)

    def get_credentials(self) -> Credentials | None:
        """The ``google.auth`` credentials the clients send, as ``GoogleBaseHook.get_credentials``:
        from the connection's key (``keyfile_dict``, ``key_path``, ``key_secret_name``), its
        workload identity config, or the environment, impersonating the chain if any. ``None``
        when the connection's ``api_endpoint`` is the emulator on loopback http (it needs none).
        Blocking (may read files or ask a metadata server)."""
        return self._settings.credentials()

    def get_credentials_and_project_id(self) -> tuple[Credentials | None, str | None]:
        """``(get_credentials(), project_id)``, as ``GoogleBaseHook`` has it."""
        return self.get_credentials(), self.project_id

    @property
    def project_id(self) -> str | None:
        """The project the clients use by default: the connection's ``project``, else the
        impersonated service account's, else the key's own ``project_id``; ``None`` when none
        says (then pass ``project=`` to the client's calls)."""
        return self._settings.project_id

    def get_conn(self) -> VertexClient:
        """Airflow's hook convention: the blocking client for the hook's ``location``, same as
        :meth:`get_client` with no arguments. Close it (``with hook.get_conn() as client``)."""
        return self.get_client()

    def get_client(self, location: str | None = None, **kwargs: Any) -> VertexClient:
        """A blocking client; ``kwargs`` go to ``VertexClient`` (``retry``, ``timeout``, ...) and
        ``impersonation_chain`` overrides the hook's. Close it (``with ... as client``) to release
        its HTTP session."""
        from airflow_gpu_sched.vertex.client import VertexClient

        kwargs.setdefault("impersonation_chain", self.impersonation_chain)
        return VertexClient.from_connection(self.gcp_conn_id, location=self._location(location), **kwargs)

    def get_async_client(self, location: str | None = None, **kwargs: Any) -> AsyncVertexClient:
        """An async client, the connection read now (blocking): call outside an event loop."""
        from airflow_gpu_sched.vertex.client import AsyncVertexClient

        kwargs.setdefault("impersonation_chain", self.impersonation_chain)
        return AsyncVertexClient.from_connection(self.gcp_conn_id, location=self._location(location), **kwargs)

    async def aget_async_client(self, location: str | None = None, **kwargs: Any) -> AsyncVertexClient:
        """An async client, the connection read without blocking the loop (async tasks, triggers)."""
        from airflow_gpu_sched.vertex.client import AsyncVertexClient

        kwargs.setdefault("impersonation_chain", self.impersonation_chain)
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
