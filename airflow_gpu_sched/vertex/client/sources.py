"""The credential sources of a ``google_cloud_platform`` connection beyond a plain key, read as
the Google provider's ``GoogleBaseHook`` / ``_CredentialProvider`` read them: a key held in
Secret Manager (``key_secret_name``), a workload identity federation config
(``credential_config_file``), and impersonation through a chain of service accounts
(``impersonation_chain``). All of it is google-auth; only the endpoints differ for an emulator
(an ``api_endpoint`` off ``googleapis.com`` serves IAM Credentials and Secret Manager too).

Nothing here logs, and no error quotes a key, a token, a secret or a config's content.

May import: vertex; never airflow.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.vertex.client.endpoints import service_root

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

_SECRET_ID = re.compile(r"[a-zA-Z0-9_-]+")  # the Google provider's SECRET_ID_PATTERN (non-empty)
_ACCOUNT_PREFIX = "projects/-/serviceAccounts/"


# --------------------------------------------------------------------------- impersonation


def parse_chain(value: Any) -> tuple[str, ...] | None:
    """``impersonation_chain``: one account, a comma-separated string (as the connection form
    stores it) or a list; the last is the account impersonated, the others its delegates."""
    if value in (None, "", [], ()):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not all(isinstance(i, str) for i in items):
        raise ValueError("impersonation_chain must be a service account email, a comma-separated string "
                         "of them, or a list of them")
    chain = tuple(i.strip() for i in items if i.strip())
    if not chain:
        return None
    return chain


def project_of_account(email: str) -> str | None:
    """``sa@my-project.iam.gserviceaccount.com`` -> ``my-project`` (the Google provider's
    project for an impersonated account)."""
    _, _, domain = email.partition("@")
    return domain.split(".")[0] if domain.endswith(".iam.gserviceaccount.com") else None


def impersonate(source: Credentials, chain: Sequence[str], scopes: Sequence[str],
                api_endpoint: str | None) -> Credentials:
    """Short-lived credentials of ``chain[-1]``, obtained by ``source`` through ``chain[:-1]``
    (IAM Credentials ``generateAccessToken``; each account holds Token Creator on the next)."""
    from google.auth import impersonated_credentials

    target, delegates = chain[-1], [d if d.startswith(_ACCOUNT_PREFIX) else _ACCOUNT_PREFIX + d
                                    for d in chain[:-1]]  # the API's documented form of a delegate
    root = service_root("iamcredentials", api_endpoint)
    override = None if root == service_root("iamcredentials") else (
        f"{root}projects/-/serviceAccounts/{target}:generateAccessToken")
    return impersonated_credentials.Credentials(
        source_credentials=source, target_principal=target, delegates=delegates or None,
        target_scopes=list(scopes), iam_endpoint_override=override)


# --------------------------------------------------------------------------- Secret Manager


def secret_url(project: str, secret: str, api_endpoint: str | None) -> str:
    if not _SECRET_ID.fullmatch(secret):
        raise ValueError(f"key_secret_name {secret!r} is not a Secret Manager secret id "
                         "(letters, digits, '-' and '_' only)")
    return f"{service_root('secretmanager', api_endpoint)}projects/{project}/secrets/{secret}/versions/latest:access"


def read_key_secret(secret: str, project: str | None, scopes: Sequence[str],
                    api_endpoint: str | None, timeout: float = 30.0) -> dict[str, Any]:
    """The service-account key JSON held in Secret Manager, read with Application Default
    Credentials (as the Google provider does); ``project``: ``key_secret_project_id``, else
    ADC's project."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    adc, adc_project = google.auth.default(scopes=list(scopes))
    project = project or adc_project
    if not project:
        raise ValueError("key_secret_name: the project of the secret could not be determined from "
                         "Application Default Credentials: set key_secret_project_id")
    url = secret_url(project, secret, api_endpoint)
    with AuthorizedSession(adc) as session:
        response = session.get(url, timeout=timeout)
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}"
        raise PermissionError(f"key_secret_name: reading secret {secret!r} of project {project!r} from Secret "
                              f"Manager failed ({response.status_code}: {message}); the reader needs "
                              "secretmanager.versions.access")
    try:
        data = base64.b64decode(response.json()["payload"]["data"])
        info = json.loads(data)
    except (ValueError, KeyError, TypeError, binascii.Error):  # never echo the payload: it is a key
        raise ValueError(f"key_secret_name: secret {secret!r} does not hold a JSON key file") from None
    if not isinstance(info, dict):
        raise ValueError(f"key_secret_name: secret {secret!r} does not hold a JSON key file")
    return info


# --------------------------------------------------------------------------- workload identity federation


def credential_config(value: str | Mapping[str, Any]) -> dict[str, Any]:
    """``credential_config_file``: a path to a credential configuration file, its JSON text,
    or the parsed dict (the Google provider accepts all three)."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        raise ValueError("credential_config_file must be a file path, a JSON string or a JSON object")
    if os.path.exists(value):
        with open(value, encoding="utf-8") as handle:
            try:
                info = json.load(handle)
            except ValueError:
                raise ValueError(f"credential_config_file {value!r} is not a valid JSON file") from None
    else:
        try:
            info = json.loads(value)
        except ValueError:  # not a path that exists, and not JSON: do not echo it, it may be content
            raise ValueError("credential_config_file is neither an existing file nor a valid JSON string") from None
    if not isinstance(info, dict):
        raise ValueError("credential_config_file must hold a JSON object")
    return info


def load_config(info: Mapping[str, Any], scopes: Sequence[str], subject_token_supplier: Any = None) -> Credentials:
    """Credentials of a credential configuration. An ``external_account`` (workload identity
    federation: the subject token is exchanged at the config's ``token_url``) is built from its
    type's class directly: ``google.auth.load_credentials_from_file`` would also ask Cloud
    Resource Manager for the pool's project, which the client never needs (its project is
    given). Any other type (a key, ``impersonated_service_account``, ...) goes through google-auth."""
    import google.auth

    info = dict(info)
    scopes = list(scopes)
    if subject_token_supplier is not None:  # the client-credentials grant: an identity pool config
        if info.get("type") != "external_account" or info.get("credential_source") is not None:
            raise ValueError("idp_issuer_url needs a credential_config_file of type external_account without a "
                             "credential_source (the IdP's token is the subject token)")
        from google.auth import identity_pool

        try:
            return identity_pool.Credentials.from_info(info, scopes=scopes, subject_token_supplier=subject_token_supplier)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"credential_config_file is not a valid external account configuration: {exc}") from None
    if info.get("type") == "external_account":
        source = info.get("credential_source") or {}
        if info.get("subject_token_type") == "urn:ietf:params:aws:token-type:aws4_request":
            from google.auth import aws as kind
        elif isinstance(source, Mapping) and source.get("executable") is not None:
            from google.auth import pluggable as kind
        else:
            from google.auth import identity_pool as kind
        try:
            return kind.Credentials.from_info(info, scopes=scopes)
        except (ValueError, KeyError) as exc:  # google-auth names the field, never a token
            raise ValueError(f"credential_config_file is not a valid external account configuration: {exc}") from None
    credentials, _ = google.auth.load_credentials_from_dict(info, scopes=scopes)
    return credentials


# --------------------------------------------------------------------------- client-credentials grant


def client_credentials_supplier(issuer_url: str, client_id: str, client_secret: str,
                                extra_params: Mapping[str, str] | None = None) -> Any:
    """The Google provider's "Client Credentials Grant Flow" (``idp_issuer_url``, ``client_id``,
    ``client_secret``): a google-auth ``SubjectTokenSupplier`` that POSTs the OAuth 2.0
    client-credentials grant to the IdP and hands its ``access_token`` to the workload identity
    federation config as the subject token (cached until ``expires_in`` runs out)."""
    import time
    from urllib.parse import urlencode

    from google.auth import exceptions
    from google.auth.identity_pool import SubjectTokenSupplier

    class _ClientCredentials(SubjectTokenSupplier):
        def __init__(self) -> None:
            self._token: str | None = None
            self._expires = 0.0

        def __repr__(self) -> str:  # never the secret
            return f"ClientCredentialsGrant(issuer={issuer_url!r})"

        def get_subject_token(self, context: Any, request: Any) -> str:
            if self._token is not None and time.monotonic() < self._expires:
                return self._token
            body = urlencode({"grant_type": "client_credentials", "client_id": client_id,
                              "client_secret": client_secret, **dict(extra_params or {})})
            try:
                response = request(url=issuer_url, method="POST", body=body,
                                   headers={"Content-Type": "application/x-www-form-urlencoded"})
            except exceptions.TransportError as exc:
                raise exceptions.RefreshError(f"idp_issuer_url {issuer_url} unreachable: {type(exc).__name__}") from None
            if response.status != 200:  # the IdP's answer may echo the request: never quote it
                raise exceptions.RefreshError(f"idp_issuer_url {issuer_url} refused the client credentials grant "
                                              f"of client_id {client_id!r} (HTTP {response.status})")
            try:
                answer = json.loads(response.data)
                token, expires_in = answer["access_token"], float(answer.get("expires_in", 0))
            except (ValueError, KeyError, TypeError):
                raise exceptions.RefreshError(f"idp_issuer_url {issuer_url} answered without an access_token "
                                              f"and a numeric expires_in") from None
            if not isinstance(token, str) or not token:
                raise exceptions.RefreshError(f"idp_issuer_url {issuer_url} answered an empty access_token")
            self._token, self._expires = token, time.monotonic() + max(0.0, expires_in - 30)
            return token

    return _ClientCredentials()
