"""Parser and evaluator for the ``filter=`` of Vertex AI's list methods, per collection.

This is a small subset of AIP-160, enough for the emulator::

    filter     := [expr]                      # empty / blank -> matches everything
    expr       := sequence ("AND" sequence)*
    sequence   := factor (factor)*            # juxtaposition is an implicit AND
    factor     := unary ("OR" unary)*
    unary      := "NOT" unary | "(" expr ")" | comparison
    comparison := field op value
    value      := "double quoted"  (\\" and \\\\ escapes) | bare_word

Fields and the operators each one accepts are exactly what Google documents for that
collection's ``list`` (the ``filter`` parameter of the aiplatform v1 discovery document;
:data:`FIELDS`); any other field, ``update_time`` included, is refused naming the supported ones:

    customJobs, hyperparameterTuningJobs:
        display_name  =  !=  :      state  =  !=   (enum names, e.g. JOB_STATE_RUNNING)
        create_time   =  !=  <  <=  >  >=   (RFC 3339, e.g. "2026-11-30T00:00:00Z")
        labels.KEY    =  !=  :      (``labels.KEY=value``, ``labels.KEY:*``)
    trainingPipelines: the above, plus training_task_definition  =  !=  :
    models: model (the id)  =  !=   display_name  =  !=   labels.KEY  =  !=  :  (and
        ``labels:KEY``)   base_model_name  =   (snake_case or camelCase field names)
    persistentResources.list takes no filter at all (the method has no such parameter).

``:`` is "has": with a ``*`` in the value it is an fnmatch-style wildcard match
over the whole value, otherwise a substring test.  ``labels.KEY:*`` means the
label key exists.  A missing label never equals anything, so ``labels.k!="v"``
matches records without label ``k``.

Keywords ``AND``, ``OR`` and ``NOT`` are case-sensitive.  **Precedence is AIP-160's**
(https://google.aip.dev/160, the grammar Google's list filters follow): NOT, then OR, then
juxtaposition, then AND, so ``a AND b OR c`` is ``a AND (b OR c)``, unlike most languages.
Filters our own code writes parenthesize every OR, so they read the same either way.

Usage::

    pred = parse_filter('state=JOB_STATE_RUNNING AND labels.team:*')
    matching = [r for r in records if pred(r)]

A record is a mapping with the collection's fields: ``display_name`` (str),
``state`` (str), ``create_time`` (tz-aware datetime), ``labels`` (dict[str, str]), ...
Syntax errors and unsupported fields raise :class:`FilterError`.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

__all__ = ["FIELDS", "FilterError", "Predicate", "parse_filter"]


class FilterError(ValueError):
    """A filter string could not be parsed; the message names the column."""


_TIME_OPS = ("=", "!=", "<", "<=", ">", ">=")
_LABEL_OPS = ("=", "!=", ":")
_JOB_FIELDS = {"display_name": ("string", ("=", "!=", ":")), "state": ("string", ("=", "!=")),
               "create_time": ("time", _TIME_OPS), "labels": ("labels", _LABEL_OPS)}
# collection -> field -> (kind, operators), as each list's ``filter`` parameter documents them
FIELDS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "customJobs": _JOB_FIELDS,
    "hyperparameterTuningJobs": _JOB_FIELDS,
    "trainingPipelines": {**_JOB_FIELDS, "training_task_definition": ("string", ("=", "!=", ":"))},
    "models": {"model": ("string", ("=", "!=")), "display_name": ("string", ("=", "!=")),
               "labels": ("labels", _LABEL_OPS), "base_model_name": ("string", ("=",))},
}
_CAMEL_ALIASES = {"models": {"displayName": "display_name", "baseModelName": "base_model_name"}}  # "both supported"
_KEYWORDS = ("AND", "OR", "NOT")
_OPERATORS = ("<=", ">=", "!=", "=", "<", ">", ":")  # longest first

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$"
)


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tok:
    kind: str  # "(", ")", "OP", "STR", "WORD", "EOF"
    text: str  # the value (unescaped for STR)
    col: int  # 1-based column of the token's first character

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of input"
        if self.kind == "STR":
            return f'string "{self.text}"'
        return f"token '{self.text}'"


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "()":
            toks.append(_Tok(c, c, i + 1))
            i += 1
        elif c == '"':
            start, i, buf = i, i + 1, []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(text[i])
                i += 1
            if i >= n:
                raise FilterError(f"filter: unterminated string starting at column {start + 1}")
            toks.append(_Tok("STR", "".join(buf), start + 1))
            i += 1
        elif op := next((o for o in _OPERATORS if text.startswith(o, i)), None):
            toks.append(_Tok("OP", op, i + 1))
            i += len(op)
        else:
            # A bare word.  Right after an operator it is a value and may itself
            # contain operator characters (e.g. a bare timestamp with ':').
            after_op = bool(toks) and toks[-1].kind == "OP"
            stop = '()"' if after_op else '()"=!<>:'
            start = i
            while i < n and not text[i].isspace() and text[i] not in stop:
                i += 1
            if i == start:  # e.g. a lone '!'
                raise FilterError(f"filter: unexpected character {c!r} at column {i + 1}")
            toks.append(_Tok("WORD", text[start:i], start + 1))
    toks.append(_Tok("EOF", "", n + 1))
    return toks


# --------------------------------------------------------------------------
# Predicates
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
    left: Predicate
    right: Predicate

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return self.left(record) and self.right(record)


@dataclass(frozen=True)
class _Or(Predicate):
    left: Predicate
    right: Predicate

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return self.left(record) or self.right(record)


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


def _has(actual: str, pattern: str) -> bool:
    """The ':' operator: wildcard match if the pattern has '*', else substring."""
    if "*" in pattern:
        return fnmatch.fnmatchcase(actual, pattern)
    return pattern in actual


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


def _compile(field: _Tok, op: _Tok, value: _Tok, collection: str) -> Predicate:
    name, v = field.text, value.text
    fields = FIELDS[collection]
    name = _CAMEL_ALIASES.get(collection, {}).get(name, name)
    if name.startswith("labels.") and len(name) > len("labels.") and "labels" in fields:
        base = "labels"
    elif name == "labels" and op.text == ":" and collection == "models":  # ``labels:key``: key existence
        base, name, v = "labels", f"labels.{v}", "*"
    else:
        base = name
    if base not in fields or (base == "labels" and name == "labels"):
        raise FilterError(
            f"filter: unsupported field '{field.text}' at column {field.col}; {collection}.list supports "
            f"only these fields: {_supported(collection)}"
        )
    kind, allowed = fields[base]

    def bad_op() -> FilterError:
        return FilterError(
            f"filter: operator '{op.text}' at column {op.col} is not supported for "
            f"field '{name}'; expected one of {' '.join(allowed)}"
        )

    if op.text not in allowed:
        raise bad_op()

    if kind == "string":
        get = lambda r: str(r.get(name) or "")  # noqa: E731
        if op.text == ":":
            return _Compare(name, ":", v, lambda r: _has(get(r), v))
        cmp = _CMP[op.text]
        return _Compare(name, op.text, v, lambda r: cmp(get(r), v))

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

    key = name[len("labels.") :]
    labels = lambda r: r.get("labels") or {}  # noqa: E731
    if op.text == ":" and v == "*":
        return _Compare(name, ":", v, lambda r: key in labels(r))
    if op.text == ":":
        return _Compare(name, ":", v, lambda r: key in labels(r) and _has(labels(r)[key], v))
    if op.text == "=":
        return _Compare(name, "=", v, lambda r: labels(r).get(key) == v)
    return _Compare(name, "!=", v, lambda r: labels(r).get(key) != v)


# --------------------------------------------------------------------------
# Recursive-descent parser
# --------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, collection: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0
        self.collection = collection

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def advance(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def is_word(self, word: str) -> bool:
        return self.tok.kind == "WORD" and self.tok.text == word

    @staticmethod
    def error(tok: _Tok, expected: str) -> FilterError:
        return FilterError(f"filter: unexpected {tok.describe()} at column {tok.col}; expected {expected}")

    def parse(self) -> Predicate:
        pred = self.expr()
        if self.tok.kind != "EOF":
            raise self.error(self.tok, "AND, OR or end of input")
        return pred

    # AIP-160's precedence, which Google's list filters follow: OR binds tightest, then
    # juxtaposition (an implicit AND), then AND: ``a AND b OR c`` is ``a AND (b OR c)``.
    def expr(self) -> Predicate:
        pred = self.sequence()
        while self.is_word("AND"):
            self.advance()
            pred = _And(pred, self.sequence())
        return pred

    def sequence(self) -> Predicate:
        pred = self.factor()
        while self.tok.kind == "(" or (self.tok.kind == "WORD" and not self.is_word("AND") and not self.is_word("OR")):
            pred = _And(pred, self.factor())  # juxtaposition
        return pred

    def factor(self) -> Predicate:
        pred = self.unary()
        while self.is_word("OR"):
            self.advance()
            pred = _Or(pred, self.unary())
        return pred

    def unary(self) -> Predicate:
        if self.is_word("NOT"):
            self.advance()
            return _Not(self.unary())
        if self.tok.kind == "(":
            self.advance()
            pred = self.expr()
            if self.tok.kind != ")":
                raise self.error(self.tok, "')'")
            self.advance()
            return pred
        return self.comparison()

    def comparison(self) -> Predicate:
        field = self.tok
        if field.kind != "WORD" or field.text in _KEYWORDS:
            raise self.error(field, "a field name, NOT or '('")
        self.advance()
        op = self.tok
        if op.kind != "OP":
            raise self.error(op, f"an operator (= != < <= > >= :) after '{field.text}'")
        self.advance()
        value = self.tok
        if value.kind not in ("STR", "WORD") or (value.kind == "WORD" and value.text in _KEYWORDS):
            raise self.error(value, f"a value after '{op.text}'")
        self.advance()
        return _compile(field, op, value, self.collection)


def parse_filter(text: str, collection: str = "customJobs") -> Predicate:
    """Parse the list filter of ``collection`` (a key of :data:`FIELDS`) into a predicate;
    blank text matches every record."""
    if collection not in FIELDS:
        raise FilterError(f"filter: {collection}.list takes no filter")
    if not text or not text.strip():
        return _All()
    return _Parser(text, collection).parse()
