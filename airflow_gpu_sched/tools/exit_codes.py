"""The command line's exit codes and the one place that turns an exception into an exit code and
one ``error:`` line (docs/cli.md, "Exit codes"). A decision, no I/O: ``cli.py`` prints it.

    0  done, nothing found
    1  findings: a plan step breaks a rule, a quota is too low, orphans left uncancelled
    2  usage: a bad argument, a missing or unreadable file, bad JSON, a DAG file that does not
       load, a missing Airflow connection
    3  API or connection: Vertex AI (or the emulator) answered with an error, could not be
       reached, or the credentials were refused; a listing the endpoint would page forever (a
       nextPageToken it gave before, or more than tools/platform.py MAX_PAGES pages)
    4  a bug in airflow-gpu-sched: the traceback is printed, please report it
  130  interrupted (Ctrl-C)

May import: vertex; never airflow.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

OK, FINDINGS, USAGE, API, BUG, INTERRUPTED = 0, 1, 2, 3, 4, 130


class UsageError(Exception):
    """What the user must fix in what they gave us (an argument, a file, a connection): exit 2."""


class ApiError(Exception):
    """An endpoint that answered with an error or could not be reached: exit 3."""


def classify(exc: BaseException, waited: bool = False) -> tuple[int, str] | None:
    """(exit code, one line) for an error the user can act on; None for a bug (let it show)."""
    from airflow_gpu_sched.vertex.client import VertexError
    from airflow_gpu_sched.vertex.client.errors import VertexTransportError

    if isinstance(exc, UsageError):
        return USAGE, str(exc)
    if isinstance(exc, ApiError):
        return API, str(exc)
    if isinstance(exc, VertexTransportError):  # its message is cut short: the cause has urllib3's words
        text = str(exc.__cause__) if exc.__cause__ is not None else exc.message
        return API, unreachable(exc.request.url if exc.request else None, text, waited, KINDS.get(exc.kind))
    if isinstance(exc, VertexError):
        return API, _one_line(str(exc))
    if _is(exc, "requests.exceptions", "RequestException"):
        return API, unreachable(getattr(getattr(exc, "request", None), "url", None), str(exc), waited)
    if _is(exc, "google.auth.exceptions", "GoogleAuthError"):
        return API, f"credentials: {_one_line(str(exc))}"
    if isinstance(exc, json.JSONDecodeError):
        return USAGE, f"not valid JSON: {exc}"
    if isinstance(exc, OSError) and exc.filename is not None:  # a file the user named
        return USAGE, f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, ValueError):  # bad values in what the user gave (pydantic's errors are ValueErrors)
        return USAGE, _one_line(str(exc))
    return None


KINDS = {"connect": "no connection (refused, unknown host or connect timeout)", "timeout": "no answer in time",
         "protocol": "the connection broke mid-way"}


def unreachable(url: str | None, message: str, waited: bool = False, fallback: str | None = None) -> str:
    """``cannot reach http://host:port: connection refused`` and what to try."""
    where = ""
    if url:
        parts = urlsplit(url)
        where = f" {parts.scheme}://{parts.netloc}" if parts.netloc else f" {url}"
    hint = "" if waited else " (not retried; --wait retries for a while)"
    return f"cannot reach{where}: {reason(message) or fallback or _one_line(message)}{hint}"


def reason(message: str) -> str | None:
    """The cause inside urllib3's nested message: ``[Errno 111] Connection refused`` -> the words."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", message)
    if found:
        return found.group(1).strip().lower()
    for words in ("timed out", "Name or service not known", "Connection refused", "Connection reset"):
        if words.lower() in message.lower():
            return words.lower()
    return None


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is(exc: BaseException, module: str, name: str) -> bool:
    """isinstance against a class of a library we do not want to import just to ask."""
    import sys

    mod: Any = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(exc, cls)
