"""Where credentials come from (an Airflow connection: a key, a key in Secret Manager, a
workload identity federation config, or the environment; optionally impersonating a service
account through a chain) and how a bearer token is kept fresh without blocking an event loop.

Tokens and private keys are never logged, put in a message, or shown by a ``repr``; under
Airflow they are also registered with its secrets masker.

May import: vertex; airflow only inside functions.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.vertex.client import sources
from airflow_gpu_sched.vertex.client.endpoints import check_token_transport, is_loopback_http

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_OLD_PREFIX = "extra__google_cloud_platform__"
# Every extra this module reads (the Google provider's names), and the provider's fields that are
# not about credentials. Any other extra whose name looks like a credential is refused: a setting
# the hook does not understand must never leave the job running as the worker's own identity (ADC).
UNDERSTOOD_EXTRAS = frozenset({
    "project", "api_endpoint", "key_path", "keyfile_dict", "scope", "scopes", "key_secret_name",
    "key_secret_project_id", "credential_config_file", "impersonation_chain", "is_anonymous",
    "idp_issuer_url", "client_id", "client_secret", "idp_extra_params", "idp_extra_parameters",
    "quota_project_id", "num_retries"})
_CREDENTIAL_LIKE = re.compile(r"key|secret|token|credential|client|idp|passw|auth|delegat|subject|account|cert|"
                              r"impersonat|quota|principal", re.I)

Loader = Callable[[], "tuple[Credentials | None, list[str]]"]


@dataclass(frozen=True)
class ConnectionSettings:
    """What a ``google_cloud_platform`` connection says about reaching Vertex AI."""

    project: str | None = None
    api_endpoint: str | None = None
    key_path: str | None = None
    keyfile_dict: Mapping[str, Any] | None = field(default=None, repr=False, hash=False)
    scopes: tuple[str, ...] = (CLOUD_PLATFORM_SCOPE,)
    key_secret_name: str | None = None
    key_secret_project_id: str | None = None
    credential_config_file: str | Mapping[str, Any] | None = field(default=None, repr=False, hash=False)
    impersonation_chain: tuple[str, ...] | None = None
    is_anonymous: bool = False
    # the Google provider's "Client Credentials Grant Flow" (with a credential_config_file)
    idp_issuer_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False, hash=False)
    idp_extra_params: Mapping[str, str] | None = field(default=None, repr=False, hash=False)
    quota_project_id: str | None = None

    @classmethod
    def from_extras(cls, extras: Mapping[str, Any]) -> ConnectionSettings:
        """Read connection extras as the Google provider writes them: ``project``, ``key_path``,
        ``keyfile_dict`` (JSON string or dict), ``key_secret_name`` (+ ``key_secret_project_id``),
        ``credential_config_file`` (path, JSON string or dict), ``is_anonymous``,
        ``impersonation_chain`` (one account, comma-separated, or a list), ``scope``/``scopes``
        (comma-separated or list), ``api_endpoint``; each also under the old
        ``extra__google_cloud_platform__`` prefix. Like the Google provider, at most one of
        key_path, keyfile_dict, key_secret_name, credential_config_file, is_anonymous.
        ``idp_issuer_url``, ``client_id``, ``client_secret`` (+ ``idp_extra_params``) are the
        provider's client-credentials grant (with ``credential_config_file``); ``quota_project_id``
        bills the calls' quota there. An extra that looks like a credential and is none of these
        is an error (:data:`UNDERSTOOD_EXTRAS`), never a silent fall-back to ADC."""
        _refuse_unknown_credential_extras(extras)

        def get(key: str) -> Any:
            for name in (key, _OLD_PREFIX + key):
                value = extras.get(name)
                if value not in (None, ""):  # the Airflow UI stores empty fields as ""
                    return value
            return None

        keyfile = get("keyfile_dict")
        if isinstance(keyfile, str):
            try:
                keyfile = json.loads(keyfile)
            except ValueError as exc:  # never echo the text: it is a private key
                raise ValueError(f"keyfile_dict is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
        if keyfile is not None and not isinstance(keyfile, Mapping):
            raise ValueError("keyfile_dict must be a JSON object (the content of a service account key file)")
        if keyfile is not None and isinstance(keyfile.get("private_key"), str):
            # a key pasted with literal "\\n" (as the Google provider also repairs)
            keyfile = {**keyfile, "private_key": keyfile["private_key"].replace("\\n", "\n")}
        scopes = get("scopes") or get("scope")
        if isinstance(scopes, str):
            scopes = [s.strip() for s in scopes.split(",") if s.strip()]
        extra_params = get("idp_extra_params") or get("idp_extra_parameters")
        if isinstance(extra_params, str):
            try:
                extra_params = json.loads(extra_params)
            except ValueError as exc:
                raise ValueError(f"idp_extra_params is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
        if extra_params is not None and not (isinstance(extra_params, Mapping) and
                                             all(isinstance(v, str) for v in extra_params.values())):
            raise ValueError("idp_extra_params must be a JSON object of strings (extra form fields of the IdP request)")
        anonymous = get("is_anonymous")
        if isinstance(anonymous, str):
            anonymous = anonymous.strip().lower() in ("true", "1", "yes", "on")
        settings = cls(
            project=get("project"),
            api_endpoint=get("api_endpoint"),
            key_path=get("key_path"),
            keyfile_dict=dict(keyfile) if keyfile is not None else None,
            scopes=tuple(scopes) if scopes else (CLOUD_PLATFORM_SCOPE,),
            key_secret_name=get("key_secret_name"),
            key_secret_project_id=get("key_secret_project_id"),
            credential_config_file=get("credential_config_file"),
            impersonation_chain=sources.parse_chain(get("impersonation_chain")),
            is_anonymous=bool(anonymous),
            idp_issuer_url=get("idp_issuer_url"),
            client_id=get("client_id"),
            client_secret=get("client_secret"),
            idp_extra_params=dict(extra_params) if extra_params else None,
            quota_project_id=get("quota_project_id"),
        )
        settings.check_sources()
        return settings

    def check_sources(self) -> None:
        """The Google provider's rule: the explicit credential sources are mutually exclusive."""
        given = [name for name in ("key_path", "keyfile_dict", "credential_config_file", "key_secret_name",
                                   "is_anonymous") if getattr(self, name)]
        if len(given) > 1:
            raise ValueError(f"connection: {', '.join(given)} are mutually exclusive (key_path, keyfile_dict, "
                             "credential_config_file, key_secret_name and is_anonymous: give at most one)")
        grant = {"idp_issuer_url": self.idp_issuer_url, "client_id": self.client_id,
                 "client_secret": self.client_secret}
        if any(grant.values()) or self.idp_extra_params:
            missing = [name for name, value in grant.items() if not value]
            if missing or not self.credential_config_file:
                missing += [] if self.credential_config_file else ["credential_config_file"]
                raise ValueError(f"connection: the client credentials grant needs idp_issuer_url, client_id, "
                                 f"client_secret and credential_config_file (a workload identity federation "
                                 f"config, as the Google provider reads it); missing: {', '.join(missing)}")
            if not self.idp_issuer_url.startswith("https://") and not is_loopback_http(self.idp_issuer_url):
                raise ValueError("connection: idp_issuer_url must be an https URL (it is sent client_secret)")

    @classmethod
    def from_airflow(cls, conn_id: str = "google_cloud_default") -> ConnectionSettings:
        from airflow.sdk import BaseHook  # lazy: the client works without Airflow

        settings = cls.from_extras(BaseHook.get_connection(conn_id).extra_dejson)
        for secret in settings._private_keys():
            mask_secret(secret)
        return settings

    @classmethod
    async def afrom_airflow(cls, conn_id: str = "google_cloud_default") -> ConnectionSettings:
        """For triggers: reads the connection without blocking the event loop."""
        from airflow.sdk import BaseHook

        settings = cls.from_extras((await BaseHook.aget_connection(conn_id)).extra_dejson)
        for secret in settings._private_keys():
            await amask_secret(secret)
        return settings

    def with_overrides(self, project: str | None = None, api_endpoint: str | None = None,
                       impersonation_chain: str | Sequence[str] | None = None) -> ConnectionSettings:
        """Explicit client (or operator) arguments win over the connection's."""
        return replace(self, project=project or self.project, api_endpoint=api_endpoint or self.api_endpoint,
                       impersonation_chain=sources.parse_chain(impersonation_chain) or self.impersonation_chain)

    @property
    def project_id(self) -> str | None:
        """The connection's project, else the impersonated account's, else the key's own."""
        if self.project:
            return self.project
        if self.impersonation_chain and sources.project_of_account(self.impersonation_chain[-1]):
            return sources.project_of_account(self.impersonation_chain[-1])
        return (self.keyfile_dict or {}).get("project_id")

    def credentials(self) -> Credentials | None:
        """None for an http loopback endpoint (the emulator needs none); else credentials from
        ``keyfile_dict``, ``key_path``, ``key_secret_name``, ``credential_config_file``, or the
        environment (``google.auth.default``), impersonating ``impersonation_chain`` if set.
        Blocking (reads files, may ask a metadata server): call from a thread in async code."""
        credentials, secrets = self.load_credentials()
        for secret in secrets:
            mask_secret(secret)
        return credentials

    def load_credentials(self) -> tuple[Credentials | None, list[str]]:
        """(credentials, secrets to mask): masking is left to the caller, who knows whether
        it runs in an event loop."""
        if is_loopback_http(self.api_endpoint):
            return None, []
        check_token_transport(self.api_endpoint)
        credentials, secrets = self._source_credentials()
        if self.impersonation_chain and not self.is_anonymous:
            credentials = sources.impersonate(credentials, self.impersonation_chain, self.scopes, self.api_endpoint)
        if self.quota_project_id and not self.is_anonymous:
            if not hasattr(credentials, "with_quota_project"):
                raise ValueError(f"connection: quota_project_id is set but {type(credentials).__name__} credentials "
                                 "cannot carry a quota project")
            credentials = credentials.with_quota_project(self.quota_project_id)
        return credentials, secrets

    def _source_credentials(self) -> tuple[Credentials, list[str]]:
        import google.auth

        scopes = list(self.scopes)
        if self.is_anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials(), []
        if self.keyfile_dict:
            credentials, _ = google.auth.load_credentials_from_dict(dict(self.keyfile_dict), scopes=scopes)
            return credentials, self._private_keys()
        if self.key_path:
            if self.key_path.endswith(".p12"):
                raise ValueError("legacy .p12 keys are not supported: use a JSON key file")
            with open(self.key_path, encoding="utf-8") as handle:
                info = json.load(handle)
            credentials, _ = google.auth.load_credentials_from_dict(info, scopes=scopes)
            return credentials, _private_keys_of(info)
        if self.key_secret_name:
            info = sources.read_key_secret(self.key_secret_name, self.key_secret_project_id, scopes,
                                           self.api_endpoint)
            credentials, _ = google.auth.load_credentials_from_dict(info, scopes=scopes)
            return credentials, _private_keys_of(info)
        if self.credential_config_file:
            info = sources.credential_config(self.credential_config_file)
            supplier = sources.client_credentials_supplier(
                self.idp_issuer_url, self.client_id or "", self.client_secret or "", self.idp_extra_params
            ) if self.idp_issuer_url else None
            return sources.load_config(info, scopes, supplier), _private_keys_of(info) + self._private_keys()
        credentials, _ = google.auth.default(scopes=scopes)
        return credentials, []

    def _private_keys(self) -> list[str]:
        return _private_keys_of(self.keyfile_dict or {}) + ([self.client_secret] if self.client_secret else [])


def _refuse_unknown_credential_extras(extras: Mapping[str, Any]) -> None:
    unknown = sorted(name for name, value in extras.items() if value not in (None, "")
                     and (name[len(_OLD_PREFIX):] if name.startswith(_OLD_PREFIX) else name) not in UNDERSTOOD_EXTRAS
                     and _CREDENTIAL_LIKE.search(name))
    if unknown:
        raise ValueError(f"connection: extra field(s) {', '.join(unknown)} look like credentials this hook does not "
                         f"understand; refusing rather than running as Application Default Credentials (it reads: "
                         f"{', '.join(sorted(UNDERSTOOD_EXTRAS))})")


def _private_keys_of(info: Mapping[str, Any]) -> list[str]:
    return [str(info[k]) for k in ("private_key", "client_secret", "refresh_token") if info.get(k)]


def token_source_for(credentials: Credentials | None, settings: ConnectionSettings) -> TokenSource:
    """The clients' rule: explicit credentials win; none for a loopback http emulator; else
    credentials found from ``settings`` on first use. A token is never sent over remote http
    (checked here, at construction, rather than at the first request)."""
    if credentials is not None:
        from google.auth.credentials import AnonymousCredentials

        if not isinstance(credentials, AnonymousCredentials):
            check_token_transport(settings.api_endpoint)
        return TokenSource(credentials)
    if is_loopback_http(settings.api_endpoint):
        return TokenSource(None)
    check_token_transport(settings.api_endpoint)
    return TokenSource(loader=settings.load_credentials)


# --------------------------------------------------------------------------- masking


def mask_secret(secret: str) -> None:
    """Register a secret with Airflow's log masker, when running under Airflow."""
    if "airflow.sdk" not in sys.modules:  # not under Airflow: importing it would load its config
        return
    from airflow_gpu_sched import compat

    _mask = compat.resolve("mask_secret", None)  # read now: a test may patch Airflow's
    if _mask is None:
        return
    with suppress(Exception):  # masking must never break a request
        _mask(secret)


async def amask_secret(secret: str) -> None:
    """Async form: Airflow's sync masker may deadlock on its supervisor channel in a loop."""
    if "airflow.sdk" not in sys.modules:
        return
    from airflow_gpu_sched import compat

    _amask = compat.resolve("amask_secret", None)
    if _amask is None:
        return
    with suppress(Exception):
        await _amask(secret)


# --------------------------------------------------------------------------- tokens


class TokenSource:
    """Authorization headers from google-auth credentials, refreshed when stale.

    ``credentials=None`` and no ``loader``: no headers (an emulator). A ``loader`` defers
    finding credentials (ADC may query a metadata server) to the first request, which in
    async code runs in a thread.
    """

    def __init__(self, credentials: Credentials | None = None, *, loader: Loader | None = None):
        self._credentials = credentials
        self._loader = loader
        self._lock = threading.Lock()  # one refresh at a time across threads
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._to_mask: list[str] = []
        self._mask_lock = threading.Lock()  # short-held, unlike _lock which spans a refresh
        self._request: Any = None

    def __repr__(self) -> str:
        kind = type(self._credentials).__name__ if self._credentials is not None else None
        return f"TokenSource(credentials={kind})"

    def headers(self) -> dict[str, str]:
        if self._stale():
            self._refresh()
        for secret in self._take_masks():
            mask_secret(secret)
        return self._apply()

    async def aheaders(self) -> dict[str, str]:
        if self._stale():
            async with self._async_lock():
                if self._stale():  # another caller may have refreshed while we waited
                    await asyncio.to_thread(self._refresh)
        for secret in self._take_masks():
            await amask_secret(secret)
        return self._apply()

    def _stale(self) -> bool:
        return self._loader is not None or (self._credentials is not None and not self._credentials.valid)

    def _refresh(self) -> None:
        """Blocking: load and/or refresh the credentials."""
        with self._lock:
            if self._loader is not None:
                self._credentials, secrets = self._loader()
                self._loader = None
                self._queue_masks(secrets)
            credentials = self._credentials
            if credentials is None or credentials.valid:
                return
            if self._request is None:
                import google.auth.transport.requests

                self._request = google.auth.transport.requests.Request()
            credentials.refresh(self._request)
            if getattr(credentials, "token", None):
                self._queue_masks([credentials.token])

    def _queue_masks(self, secrets: Sequence[str]) -> None:
        with self._mask_lock:
            self._to_mask.extend(secrets)

    def _take_masks(self) -> Sequence[str]:
        with self._mask_lock:
            taken, self._to_mask = self._to_mask, []
        return taken

    def _apply(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self._credentials is not None:
            self._credentials.apply(headers)
        return headers

    def _async_lock(self) -> asyncio.Lock:
        # An asyncio.Lock belongs to one loop; keep one per loop so a client survives asyncio.run() twice.
        loop = asyncio.get_running_loop()
        lock = self._async_locks.get(loop)
        if lock is None:
            lock = self._async_locks[loop] = asyncio.Lock()
        return lock
