"""The one strict pattern of a Vertex AI resource name, checked wherever a name comes from
outside (an API answer, the submission ledger, XCom, a CLI argument) before it goes into a URL.

``projects/PROJECT/locations/LOCATION[/COLLECTION/ID]...[/COLLECTION][:VERB]``, where

- PROJECT: a project id (lowercase letters, digits, hyphens; a domain-scoped id may hold ``.``
  and ``:``) or a project number;
- LOCATION: lowercase letters, digits and hyphens (``us-central1``, ``global``);
- COLLECTION: a camelCase word (``customJobs``, ``persistentResources``);
- ID: letters, digits, ``-`` and ``_`` (a model's may end in ``@VERSION``).

So no ``..``, no empty segment, no ``%``, ``?`` or ``#``: a name like
``.../customJobs/../../../q/locations/l/customJobs/9`` cannot reach another project's job with
the same token, and a garbled name is a clear ValueError, not an IndexError further on.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import re

_PROJECT = r"[a-z0-9](?:[a-z0-9.:-]{0,61}[a-z0-9])?"
_LOCATION = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_COLLECTION = r"[a-z][A-Za-z0-9]{0,62}"
_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}(?:@[A-Za-z0-9_-]{1,128})?"
PATH = re.compile(rf"projects/(?P<project>{_PROJECT})/locations/(?P<location>{_LOCATION})"
                  rf"(?P<rest>(?:/{_COLLECTION}/{_ID})*)(?:/{_COLLECTION})?(?::[a-z][A-Za-z]{{0,62}})?")
RULE = ("like projects/P/locations/L/COLLECTION/ID: project and location of lowercase letters, digits "
        "and hyphens, ids of letters, digits, '-' and '_', no empty or '..' segment")


def check_path(path: str, what: str = "resource name") -> re.Match:
    """The match of a full request path (a name, a parent, a collection, ``name:verb``); raises
    ValueError naming the rule otherwise."""
    match = PATH.fullmatch(path) if isinstance(path, str) else None
    if match is None:
        shown = repr(path) if len(repr(path)) <= 200 else repr(path)[:200] + "..."
        raise ValueError(f"{shown} is not a Vertex AI {what} ({RULE}): refused before any request")
    return match


def parts(name: str, what: str = "resource name") -> tuple[str, str, str, str]:
    """``projects/P/locations/L/C/ID`` -> (P, L, C, ID), strictly: one collection and one id."""
    match = check_path(name, what)
    segments = match.group("rest").split("/")  # "", C, ID
    if len(segments) != 3 or name != f"projects/{match.group('project')}/locations/{match.group('location')}" \
                                     f"{match.group('rest')}":
        raise ValueError(f"{name!r} is not a Vertex AI {what} (like projects/P/locations/L/COLLECTION/ID)")
    return match.group("project"), match.group("location"), segments[1], segments[2]


def location(name: str, what: str = "resource name") -> str:
    return check_path(name, what).group("location")
