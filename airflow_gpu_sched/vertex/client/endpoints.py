"""Where each API is: the REST roots (regional Vertex AI, Cloud Quotas, Compute Engine, Cloud
Logging, or an emulator's one endpoint), and whether a token may travel to them.

May import: vertex; never airflow.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from urllib.parse import urlsplit, urlunsplit

from airflow_gpu_sched.vertex import resource_names

# --------------------------------------------------------------------------- endpoints

DEFAULT_API_ROOT = "https://{location}-aiplatform.googleapis.com/v1/"
_GLOBAL_API_ROOT = "https://aiplatform.googleapis.com/v1/"
CLOUD_QUOTAS_ROOT = "https://cloudquotas.googleapis.com/v1/"


def normalize_endpoint(api_endpoint: str) -> str:
    """``http://127.0.0.1:8123``, ``.../``, ``.../v1`` or ``.../v1/`` -> ``http://127.0.0.1:8123/v1/``.

    A bare host (``us-central1-aiplatform.googleapis.com``, the google-cloud client_options
    style) means https. Credentials in the URL (``user:pass@``) are refused: they would end
    up in error messages.
    """
    text = api_endpoint.strip()
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"api_endpoint {api_endpoint!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ValueError("api_endpoint must not carry credentials (user:password@); use a connection's key")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/v1/", "", ""))


def api_root(location: str, api_endpoint: str | None = None) -> str:
    """The ``.../v1/`` root for a location: regional host, or the override for every location."""
    if api_endpoint:
        return normalize_endpoint(api_endpoint)
    if location == "global":
        return _GLOBAL_API_ROOT
    if not re.fullmatch(r"[a-z0-9-]+", location or ""):
        raise ValueError(f"{location!r} is not a Vertex AI location (e.g. 'us-central1')")
    return DEFAULT_API_ROOT.format(location=location)


def quotas_root(api_endpoint: str | None = None) -> str:
    """The Cloud Quotas API's ``.../v1/`` root. Production (no override, or an override on a
    ``googleapis.com`` host such as a regional Vertex endpoint): ``https://cloudquotas.googleapis.com/v1/``.
    Any other override (the emulator, a proxy) serves Cloud Quotas on the same host:
    ``http://127.0.0.1:PORT`` -> ``http://127.0.0.1:PORT/v1/``."""
    return service_root("cloudquotas", api_endpoint)


def service_root(service: str, api_endpoint: str | None = None) -> str:
    """The ``.../v1/`` root of another Google API (``cloudquotas``, ``iamcredentials``,
    ``secretmanager``): ``https://{service}.googleapis.com/v1/`` without an override or with one
    on a ``googleapis.com`` host; any other override (the emulator, a proxy) serves it on the
    same host."""
    production = f"https://{service}.googleapis.com/v1/"
    if not api_endpoint:
        return production
    root = normalize_endpoint(api_endpoint)
    host = (urlsplit(root).hostname or "").lower()
    if host == "googleapis.com" or host.endswith(".googleapis.com"):
        return production
    return root


def compute_root(api_endpoint: str | None = None) -> str:
    """Compute Engine's ``.../compute/v1/`` root: ``https://compute.googleapis.com/compute/v1/``
    in production (no override, or one on a ``googleapis.com`` host); any other override (the
    emulator) serves it on the same host: ``http://127.0.0.1:PORT`` -> ``.../compute/v1/``."""
    root = service_root("compute", api_endpoint)
    if root.startswith("https://compute.googleapis.com/"):
        return "https://compute.googleapis.com/compute/v1/"
    return root[: -len("v1/")] + "compute/v1/"


def logging_root(api_endpoint: str | None = None) -> str:
    """Cloud Logging's ``.../v2/`` root: ``https://logging.googleapis.com/v2/``, or the same
    host as an override off ``googleapis.com`` (the emulator serves ``/v2/entries:list``)."""
    return service_root("logging", api_endpoint).removesuffix("v1/") + "v2/"


def is_loopback_http(api_endpoint: str | None) -> bool:
    """True for ``http://`` to localhost/127.0.0.0/8/::1: a local emulator, no credentials."""
    if not api_endpoint or not api_endpoint.strip().lower().startswith("http://"):
        return False
    return is_loopback_host(urlsplit(api_endpoint.strip()).hostname or "")


def is_loopback_host(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (the emulator binds only these unless told otherwise)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_transport(api_endpoint: str | None) -> None:
    """Refuse to send a bearer token over plain http anywhere but this machine."""
    if api_endpoint and api_endpoint.strip().lower().startswith("http://") and not is_loopback_http(api_endpoint):
        raise ValueError(
            f"api_endpoint {api_endpoint!r} is plain http to a remote host: an OAuth token sent there "
            "travels unencrypted and can be stolen. Use https, or http only to localhost/127.0.0.1 "
            "(an emulator, which needs no credentials)"
        )


def location_of(name: str) -> str:
    """``projects/p/locations/us-east4/customJobs/1`` -> ``us-east4``; the whole name checked
    against the one strict pattern (:mod:`airflow_gpu_sched.vertex.resource_names`)."""
    return resource_names.location(name)
