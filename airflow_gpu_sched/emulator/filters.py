"""Parser and evaluator for the ``filter=`` of Vertex AI's list methods, per collection.

The grammar is AIP-160's (https://google.aip.dev/160 and its EBNF,
https://google.aip.dev/assets/misc/ebnf-filtering.txt), which the v1 protos name for these lists::

    filter      := [expression]               # empty / blank -> matches everything
    expression  := sequence ("AND" sequence)*
    sequence    := factor (factor)*           # juxtaposition is an implicit AND
    factor      := term ("OR" term)*
    term        := ["NOT" | "-"] simple       # one negation per term, as the EBNF has it
    simple      := restriction | "(" expression ")"
    restriction := member comparator value
    member      := segment ("." segment)*     # a segment is bare text or a quoted string
    value       := "double quoted" | 'single quoted' (backslash escapes) | bare_text

**Precedence is AIP-160's**: NOT, then OR, then juxtaposition, then AND, so ``a AND b OR c``
is ``a AND (b OR c)``, unlike most languages. Filters our own code writes parenthesize every OR,
so they read the same either way. ``AND``, ``OR`` and ``NOT`` are case-sensitive.

Fields and the operators each one accepts are exactly what Google documents for that
collection's ``list`` (the ``filter`` comment of ListCustomJobsRequest & co. in the v1 protos;
:data:`FIELDS`); any other field, ``update_time`` included, is refused naming the supported ones:

    customJobs, hyperparameterTuningJobs:
        display_name  =  !=  :      state  =  !=   (JobState names, e.g. JOB_STATE_RUNNING)
        create_time   =  !=  <  <=  >  >=   (RFC 3339, e.g. "2026-11-30T00:00:00Z")
        labels.KEY    =  !=  :      (``labels.KEY=value``, ``labels.KEY:*``, ``labels:KEY``)
    trainingPipelines: the above (state: PipelineState names), plus training_task_definition = != :
    models: model (the id) = !=   display_name = !=   labels.KEY = != :   base_model_name =
        (snake_case or camelCase field names, as documented)
    persistentResources.list takes no filter at all (the method has no such parameter).

Meanings (each from AIP-160 or the proto's own words):

* ``*`` in a string compared with ``=``/``!=`` is a wildcard over the whole value (AIP-160:
  "when comparing strings for equality, services should support wildcards");
  ``display_name:"my_job_*"`` is the ``:`` wildcard the protos document; ``field:*`` is true
  when the field is set (not empty).
* ``labels.KEY:*`` and ``labels:KEY`` are key existence; ``labels.KEY:value`` is equality
  (AIP-160: ``m.foo:42`` "True if m.foo is 42"); a key with other characters is quoted,
  ``labels."a key"="v"`` (models.list's words; every AIP-160 member may be quoted).
  A missing label never equals anything, so ``labels.k!="v"`` matches records without ``k``.
* ``state`` takes the collection's enum names only; an unknown name is refused (AIP-160: "Enums
  expect the enum's string representation"), so a typo never silently matches nothing.

Forms AIP-160 allows but the emulator does not implement are refused naming the form (400,
INVALID_ARGUMENT): a bare value with no field (a global restriction), function calls, a
parenthesized value after a comparator, ``:`` on a string without ``*`` (the protos document
``:`` only as a wildcard), traversal below ``labels.KEY``.

Limits (the emulator's own: the protos name none; AIP-160 "Limitations" lets a service cap
filters, refused with INVALID_ARGUMENT): at most :data:`MAX_FILTER_LENGTH` characters and
:data:`MAX_NESTING` levels of parentheses, so no filter can exhaust the parser's stack.

Usage::

    pred = parse_filter('state=JOB_STATE_RUNNING AND labels.team:*')
    matching = [r for r in records if pred(r)]

A record is a mapping with the collection's fields: ``display_name`` (str),
``state`` (str), ``create_time`` (tz-aware datetime), ``labels`` (dict[str, str]), ...
Syntax errors and unsupported fields raise :class:`FilterError`.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

from airflow_gpu_sched.emulator.filter_tokens import KEYWORDS, FilterError, Token, tokenize
from airflow_gpu_sched.vertex.enums import JobState, PipelineState

__all__ = ["FIELDS", "MAX_FILTER_LENGTH", "MAX_NESTING", "FilterError", "Predicate", "parse_filter"]

MAX_FILTER_LENGTH = 8192  # characters; a filter our poller writes is ~300
MAX_NESTING = 32  # levels of "(" (a NOT adds none: the grammar allows one per term)
_TIME_OPS = ("=", "!=", "<", "<=", ">", ">=")
_LABEL_OPS = ("=", "!=", ":")
# job_state.proto and pipeline_state.proto (v1): the names a ``state`` filter may compare with
JOB_STATES = tuple(JobState.__members__)
PIPELINE_STATES = tuple(PipelineState.__members__)
_JOB_FIELDS = {"display_name": ("string", ("=", "!=", ":")), "state": (JOB_STATES, ("=", "!=")),
               "create_time": ("time", _TIME_OPS), "labels": ("labels", _LABEL_OPS)}
# collection -> field -> (kind or enum names, operators), as each list's ``filter`` comment documents them
FIELDS: dict[str, dict[str, tuple[Any, tuple[str, ...]]]] = {
    "customJobs": _JOB_FIELDS,
    "hyperparameterTuningJobs": _JOB_FIELDS,
    "trainingPipelines": {**_JOB_FIELDS, "state": (PIPELINE_STATES, ("=", "!=")),
                          "training_task_definition": ("string", ("=", "!=", ":"))},
    "models": {"model": ("string", ("=", "!=")), "display_name": ("string", ("=", "!=")),
               "labels": ("labels", _LABEL_OPS), "base_model_name": ("string", ("=",))},
}
_CAMEL_ALIASES = {"models": {"displayName": "display_name", "baseModelName": "base_model_name"}}  # "both supported"

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$"
)


# --------------------------------------------------------------------------
# Predicates (AND/OR hold flat tuples: a long chain never recurses deeply)
# --------------------------------------------------------------------------


class Predicate:
    """A compiled filter; call it with a record to test whether it matches."""

    def __call__(self, record: Mapping[str, Any]) -> bool:  # pragma: no cover
        raise NotImplementedError


class _All(Predicate):
    def __call__(self, record: Mapping[str, Any]) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL"


@dataclass(frozen=True)
class _Not(Predicate):
    inner: Predicate

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return not self.inner(record)


@dataclass(frozen=True)
class _And(Predicate):
    parts: tuple[Predicate, ...]

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return all(p(record) for p in self.parts)


@dataclass(frozen=True)
class _Or(Predicate):
    parts: tuple[Predicate, ...]

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return any(p(record) for p in self.parts)


def _and(parts: list[Predicate]) -> Predicate:
    return parts[0] if len(parts) == 1 else _And(tuple(parts))


def _or(parts: list[Predicate]) -> Predicate:
    return parts[0] if len(parts) == 1 else _Or(tuple(parts))


@dataclass(frozen=True)
class _Compare(Predicate):
    field: str
    op: str
    value: Any
    test: Callable[[Mapping[str, Any]], bool]

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return self.test(record)

    def __repr__(self) -> str:
        return f"{self.field}{self.op}{self.value!r}"


def wildcard_match(parts: tuple[str, ...], actual: str) -> bool:
    """``actual`` against a pattern split at its ``*`` (``parts``, at least two): the first part a
    prefix, the last a suffix, the middle ones found in order, each at its leftmost place. With
    only ``*`` as a metacharacter the leftmost place is always a right choice, so this never
    backtracks: time linear in pattern and value (a regex of ``.*`` backtracks exponentially on
    ``*a*a*...*b`` against ``aaa...``, issue 37)."""
    first, *middle, last = parts
    if len(actual) < len(first) + len(last) or not actual.startswith(first) or not actual.endswith(last):
        return False
    at, end = len(first), len(actual) - len(last)
    for part in middle:
        found = actual.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _wildcard(pattern: str) -> Callable[[str], bool]:
    """``*`` matches any run of characters; nothing else is special (unlike fnmatch's ``?``, ``[``)."""
    parts = tuple(pattern.split("*"))
    return lambda actual: wildcard_match(parts, actual)


def _equals(pattern: str) -> Callable[[str], bool]:
    return _wildcard(pattern) if "*" in pattern else (lambda actual: actual == pattern)


def _parse_time(value: str) -> datetime | None:
    m = _RFC3339.match(value)
    if not m:
        return None
    date, clock, frac, tz = m.groups()
    frac = (frac or "")[:6].ljust(6, "0")  # Python datetimes stop at microseconds
    tz = "+00:00" if tz in "Zz" else tz
    try:
        return datetime.fromisoformat(f"{date}T{clock}.{frac}{tz}")
    except ValueError:  # e.g. month 13
        return None


def _record_time(record: Mapping[str, Any], field: str) -> datetime | None:
    value = record.get(field)
    if isinstance(value, str):
        return _parse_time(value)
    return value if isinstance(value, datetime) else None


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _supported(collection: str) -> str:
    return ", ".join("labels.<key>" if f == "labels" else f for f in FIELDS[collection])


def _unsupported_field(field: Token, collection: str) -> FilterError:
    return FilterError(
        f"filter: unsupported field '{field.text}' at column {field.col}; {collection}.list supports "
        f"only these fields: {_supported(collection)}"
    )


def _compile(field: Token, op: Token, value: Token, collection: str) -> Predicate:
    fields = FIELDS[collection]
    segments = list(field.segments)
    segments[0] = _CAMEL_ALIASES.get(collection, {}).get(segments[0], segments[0])
    base, v = segments[0], value.text
    if base not in fields:
        raise _unsupported_field(field, collection)
    kind, allowed = fields[base]
    if base == "labels":
        if len(segments) == 1 and op.text == ":":  # ``labels:KEY``: key existence (AIP-160 ``m:foo``)
            segments, v = ["labels", v], "*"
            if not value.text:
                raise _unsupported_field(field, collection)
        if len(segments) != 2 or not segments[1]:
            if len(segments) > 2:
                raise FilterError(f"filter: '{field.text}' at column {field.col}: labels.<key> takes one key; "
                                  "a label value has no fields to traverse")
            raise _unsupported_field(field, collection)
    elif len(segments) != 1:
        raise FilterError(f"filter: '{field.text}' at column {field.col}: field '{base}' has no fields "
                          "to traverse; the emulator does not implement traversal below it")
    name = ".".join(segments)

    if op.text not in allowed:
        raise FilterError(
            f"filter: operator '{op.text}' at column {op.col} is not supported for "
            f"field '{name}'; expected one of {' '.join(allowed)}"
        )

    if isinstance(kind, tuple):  # an enum: its names only, never a typo that matches nothing
        if v not in kind:
            raise FilterError(f"filter: invalid value {v!r} for field '{name}' at column {value.col}; "
                              f"expected one of {', '.join(kind)}")
        cmp = _CMP[op.text]
        return _Compare(name, op.text, v, lambda r: cmp(str(r.get(name) or ""), v))

    if kind == "string":
        get = lambda r: str(r.get(name) or "")  # noqa: E731
        if op.text == ":":
            if v == "*":
                return _Compare(name, ":", v, lambda r: get(r) != "")
            if "*" not in v:
                raise FilterError(
                    f"filter: '{name}:{v}' at column {op.col}: the emulator implements ':' on {name} only as "
                    f"the wildcard match the API documents (a value with '*', e.g. {name}:\"{v}*\"); "
                    f"for equality write {name}=\"{v}\""
                )
            match = _wildcard(v)
            return _Compare(name, ":", v, lambda r: match(get(r)))
        match = _equals(v)
        if op.text == "=":
            return _Compare(name, "=", v, lambda r: match(get(r)))
        return _Compare(name, "!=", v, lambda r: not match(get(r)))

    if kind == "time":
        when = _parse_time(v)
        if when is None:
            raise FilterError(
                f"filter: invalid timestamp {v!r} at column {value.col}; expected "
                'RFC 3339 like "2026-11-30T00:00:00Z"'
            )
        cmp = _CMP[op.text]

        def test_time(r: Mapping[str, Any]) -> bool:
            actual = _record_time(r, name)
            return actual is not None and cmp(actual, when)

        return _Compare(name, op.text, when, test_time)

    key = segments[1]
    labels = lambda r: r.get("labels") or {}  # noqa: E731
    if op.text == ":" and v == "*":
        return _Compare(name, ":", v, lambda r: key in labels(r))
    match = _equals(v)
    if op.text in ("=", ":"):  # ``m.foo:42``: "True if m.foo is 42" (AIP-160)
        return _Compare(name, op.text, v, lambda r: key in labels(r) and match(labels(r)[key]))
    return _Compare(name, "!=", v, lambda r: not (key in labels(r) and match(labels(r)[key])))


# --------------------------------------------------------------------------
# Recursive-descent parser
# --------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, collection: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0
        self.collection = collection

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def advance(self) -> Token:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    @staticmethod
    def error(tok: Token, expected: str) -> FilterError:
        return FilterError(f"filter: unexpected {tok.describe()} at column {tok.col}; expected {expected}")

    def parse(self) -> Predicate:
        pred = self.expression()
        if self.tok.kind != "EOF":
            raise self.error(self.tok, "AND, OR or end of input")
        return pred

    # AIP-160's precedence, which Google's list filters follow: OR binds tightest, then
    # juxtaposition (an implicit AND), then AND: ``a AND b OR c`` is ``a AND (b OR c)``.
    def expression(self) -> Predicate:
        parts = [self.sequence()]
        while self.tok.kind == "AND":
            self.advance()
            parts.append(self.sequence())
        return _and(parts)

    def sequence(self) -> Predicate:
        parts = [self.factor()]
        while self.tok.kind in ("(", "NOT", "MEMBER"):
            parts.append(self.factor())  # juxtaposition
        return _and(parts)

    def factor(self) -> Predicate:
        parts = [self.term()]
        while self.tok.kind == "OR":
            self.advance()
            parts.append(self.term())
        return _or(parts)

    def term(self) -> Predicate:
        if self.tok.kind == "NOT":
            self.advance()
            if self.tok.kind == "NOT":  # the EBNF: term := [NOT | -] simple
                raise self.error(self.tok, "a field name or '(' after a negation (one NOT or '-' per term)")
            return _Not(self.simple())
        return self.simple()

    def simple(self) -> Predicate:
        if self.tok.kind == "(":
            if self.depth >= MAX_NESTING:
                raise FilterError(f"filter: parentheses nested deeper than {MAX_NESTING} levels at column "
                                  f"{self.tok.col} (the emulator's limit)")
            self.depth += 1
            self.advance()
            pred = self.expression()
            if self.tok.kind != ")":
                raise self.error(self.tok, "')'")
            self.advance()
            self.depth -= 1
            return pred
        return self.restriction()

    def restriction(self) -> Predicate:
        field = self.tok
        if field.kind != "MEMBER":
            raise self.error(field, "a field name, NOT, '-' or '('")
        self.advance()
        op = self.tok
        if op.kind == "(" and op.col == field.end:
            raise FilterError(f"filter: function call '{field.text}(...)' at column {field.col}: the emulator "
                              "implements no filter functions (Vertex documents none for this list)")
        if op.kind != "OP":
            if op.kind in ("EOF", "AND", "OR", ")", "MEMBER", "NOT", "("):
                raise FilterError(
                    f"filter: bare value '{field.text}' at column {field.col} (a global restriction, "
                    f"AIP-160): the emulator does not implement it; name a field, e.g. "
                    f"display_name=\"{field.text}\"")
            raise self.error(op, f"an operator (= != < <= > >= :) after '{field.text}'")
        self.advance()
        value = self.tok
        if value.kind == "(":
            raise FilterError(f"filter: a parenthesized value after '{op.text}' at column {value.col}: the "
                              "emulator does not implement value groups; write (a=1 OR a=2)")
        if value.kind != "VALUE":
            raise self.error(value, f"a value after '{op.text}'")
        if not value.quoted and value.text in KEYWORDS:
            raise self.error(value, f"a value after '{op.text}'")
        self.advance()
        return _compile(field, op, value, self.collection)


def parse_filter(text: str, collection: str = "customJobs") -> Predicate:
    """Parse the list filter of ``collection`` (a key of :data:`FIELDS`) into a predicate;
    blank text matches every record."""
    if collection not in FIELDS:
        raise FilterError(f"filter: {collection}.list takes no filter")
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(f"filter: {len(text)} characters is longer than the emulator's limit of "
                          f"{MAX_FILTER_LENGTH}")
    if not text or not text.strip():
        return _All()
    return _Parser(text, collection).parse()
