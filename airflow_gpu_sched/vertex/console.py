"""Where the Google Cloud console is: ``https://console.cloud.google.com``, or the host set in
``[gpu_sched] console_domain`` (another universe, a proxy). The one place links are built
from and checked against: an extra link is only ever an ``https://`` URL on that host, so a
``console_links`` XCom written by someone else (``javascript:...``, another site) is no link.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

SECTION = "gpu_sched"
OPTION = "console_domain"
DEFAULT_DOMAIN = "console.cloud.google.com"
_HOST = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$")


class ConsoleDomainError(ValueError):
    """``[gpu_sched] console_domain`` is not a host name."""


def check_domain(value: str) -> str:
    """A bare host name (``console.cloud.google.com``): no scheme, port, path or user."""
    domain = value.strip().lower()
    if not _HOST.match(domain):
        raise ConsoleDomainError(f"[{SECTION}] {OPTION}: {value!r} is not a host name such as {DEFAULT_DOMAIN!r} "
                                 "(no scheme, port or path)")
    return domain


def console_domain() -> str:
    """The configured host (read each call: it is cheap, and the API server and workers each read theirs)."""
    from airflow_gpu_sched import compat

    conf = compat.resolve("conf", None)  # None: no Airflow (the tools' pure parts)
    if conf is None:
        return DEFAULT_DOMAIN
    return check_domain(conf.get(SECTION, OPTION, fallback=None) or DEFAULT_DOMAIN)


def console_root(domain: str | None = None) -> str:
    return f"https://{domain or console_domain()}"


def is_console_url(url: object, domain: str | None = None) -> bool:
    """An ``https://`` URL on the console's host and nothing else: no user part, no port."""
    if not isinstance(url, str) or any(c in url for c in "\r\n\t\\ \"'<>"):  # never in a console URL
        return False
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return (parts.scheme == "https" and port is None and parts.username is None
            and parts.netloc.lower() == (domain or console_domain()))
