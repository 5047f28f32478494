"""The one rule for what text from a job must not show: every value of the job's ``env``, in the
forms a program prints it, cut out as ``***`` (pure; the masker registration is the callers').

Which values: every ``env[].value`` anywhere in the job's REST JSON (:func:`env_values`: every
worker pool of ``jobSpec``, a tuning job's ``trialJobSpec``, a pipeline's ``trainingTaskInputs``),
of at least :data:`MIN_SECRET` characters. That is Airflow's secrets masker's own rule (``[logging]
min_length_masked_secret``, 5 by default: shorter values such as ``1`` or ``true`` would shred
every line without hiding anything), and a caller under Airflow passes the configured length
(:func:`airflow_min_length` in the triggers and operators). Values the masker never masks
(``airflow``) are not cut either.

Values Airflow's masker hides in the worker (a sensitive Variable rendered into ``args``) are
cut too, without their text leaving the worker: the worker tells the trigger only *where* in the
job's spec the masker cut (:func:`masked_spans`: a path and character positions), and the
trigger reads the text at those places from the job as Vertex returns it (:func:`values_at`).

Which forms (:func:`forms`): as printed (``print(token)``), JSON-escaped (``json.dumps`` of a
dict holding it, with or without ``ensure_ascii``), Python's repr (``print(os.environ)`` or
``print(repr(token))``), URL-encoded (a token in a printed URL), and, for a multi-line value
(a PEM key), each of its lines: Cloud Logging makes each line a process prints its own entry.

May import: orchestration; never airflow.
"""

from __future__ import annotations

import difflib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

MIN_SECRET = 5  # Airflow's SecretsMasker.min_length_to_mask default ([logging] min_length_masked_secret)
NEVER_MASKED = frozenset({"airflow"})  # Airflow's SECRETS_TO_SKIP_MASKING: its masker leaves it too
MASK = "***"
MAX_SPANS = 200  # masked places told to a trigger (its kwargs stay small; a spec has a few)
Span = tuple[tuple[Any, ...], int, int]  # (path into the job's REST JSON, start, end) of a masked text


def env_values(wire: Any) -> set[str]:
    """Every ``env[].value`` anywhere in a job's REST JSON (every pool, a tuning job's trial spec,
    a pipeline's training task inputs)."""
    return {value for _, value in env_items(wire)}


def env_items(wire: Any) -> set[tuple[str, str]]:
    """Every ``(env[].name, env[].value)`` anywhere in a job's REST JSON."""
    found: set[tuple[str, str]] = set()
    if isinstance(wire, dict):
        for key, value in wire.items():
            if key == "env" and isinstance(value, list):
                found |= {(str(e.get("name") or ""), str(e["value"])) for e in value
                          if isinstance(e, dict) and e.get("value") is not None}
            else:
                found |= env_items(value)
    elif isinstance(wire, list):
        for item in wire:
            found |= env_items(item)
    return found


def maskable(secret: str, min_length: int = MIN_SECRET) -> bool:
    return len(secret) >= min_length and secret.lower() not in NEVER_MASKED


def forms(secret: str, min_length: int = MIN_SECRET) -> set[str]:
    """The texts ``secret`` may show as in a job's output (see the module's docstring)."""
    if not maskable(secret, min_length):
        return set()
    found = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    lines = secret.splitlines()
    if len(lines) > 1:
        found |= {line.strip() for line in lines if maskable(line.strip(), min_length)}
    return {f for f in found if f}


class Redactor:
    """Cuts the given secrets (every form) out of texts, in one pass: at each position the longest
    form wins, so a secret inside another is not left half-cut."""

    def __init__(self, secrets: Iterable[str] = (), min_length: int = MIN_SECRET):
        self.min_length = min_length
        self.secrets: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        known = self.secrets | {s for s in secrets if isinstance(s, str) and maskable(s, self.min_length)}
        if known == self.secrets:
            return
        self.secrets = frozenset(known)
        every = set().union(*(forms(s, self.min_length) for s in known))
        self._pattern = re.compile("|".join(re.escape(f) for f in sorted(every, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        return text if self._pattern is None or not text else self._pattern.sub(MASK, text)

    def text(self, text: str | None) -> str | None:
        return None if text is None else self(text)


def redact(text: str | None, secrets: Iterable[str], min_length: int = MIN_SECRET) -> str | None:
    """``text`` with every form of every secret cut out."""
    return Redactor(secrets, min_length).text(text)


def string_leaves(wire: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every string in a REST JSON value, with its path (keys and list indexes)."""
    if isinstance(wire, str):
        yield path, wire
    elif isinstance(wire, dict):
        for key, value in wire.items():
            yield from string_leaves(value, (*path, key))
    elif isinstance(wire, list):
        for index, value in enumerate(wire):
            yield from string_leaves(value, (*path, index))


def cut_spans(original: str, redacted: str) -> list[tuple[int, int]]:
    """Where ``redacted`` (``original`` with secrets replaced by ``***``) differs: the cut parts."""
    ops = difflib.SequenceMatcher(None, original, redacted, autojunk=False).get_opcodes()
    return [(i1, i2) for tag, i1, i2, _, _ in ops if tag in ("replace", "delete") and i2 > i1]


def masked_spans(wire: Any, mask: Callable[[str], str]) -> list[Span]:
    """Where ``mask`` (Airflow's masker in the worker) cuts something in a job's REST JSON: the
    places, never the texts (at most :data:`MAX_SPANS`)."""
    found: list[Span] = []
    for path, text in string_leaves(wire):
        masked = mask(text)
        if masked != text:
            found += [(path, start, end) for start, end in cut_spans(text, masked)]
    return found[:MAX_SPANS]


def values_at(wire: Any, spans: Iterable[Any]) -> set[str]:
    """The texts at ``spans`` (:func:`masked_spans`, as JSON lists) in a job's REST JSON; a place
    the job does not have is skipped."""
    found: set[str] = set()
    for span in spans or ():
        try:
            path, start, end = span
            value = wire
            for key in path:
                value = value[key]
            if isinstance(value, str) and isinstance(start, int) and isinstance(end, int) and 0 <= start < end:
                found.add(value[start:end])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return found
