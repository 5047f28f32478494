"""The subset of Cloud Logging's query language the emulator's ``entries:list`` reads.

Supported: comparisons on ``resource.type``, ``resource.labels.job_id``,
``resource.labels.task_name``, ``labels."ml.googleapis.com/task_name"`` (``=``, ``!=``, a value
group ``=("1" OR "2")``), ``timestamp`` (``=``, ``>``, ``>=``, ``<``, ``<=``) and ``severity``
(the same, by rank: ``severity>=ERROR``); ``AND`` (also implied by juxtaposition), ``OR``, and
parentheses. As in the logging query language, ``OR`` binds tighter than ``AND``
("a OR b AND c" is "(a OR b) AND c"). A filter that does not parse is refused with Google's
"Unparseable filter" wording (assumed); a valid field or operator outside the subset is refused
naming it (the emulator's own words: Google would run it). A filter over 20,000 characters is
refused (ListLogEntriesRequest.filter), and so are parentheses nested deeper than
:data:`MAX_NESTING` (the emulator's own limit, so no filter exhausts the parser's stack).

May import: emulator, vertex; never airflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.vertex.cloud_logging import FILTER_LIMIT, SEVERITIES, TASK_LABEL, timestamp_key

MAX_NESTING = 32  # levels of "(": the emulator's limit (Google documents none)
Entry = dict[str, Any]
Predicate = Callable[[Entry], bool]

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>!=|>=|<=|=~|!~|[=<>:()])|(?P<word>(?:[^\s=<>:()!".]+|"[^"]*")'
                    r'(?:\.(?:[^\s=<>:()!".]+|"[^"]*"))*))')
_FIELDS: dict[str, Callable[[Entry], Any]] = {
    "resource.type": lambda e: e.get("resource", {}).get("type", ""),
    "resource.labels.job_id": lambda e: e.get("resource", {}).get("labels", {}).get("job_id", ""),
    "resource.labels.task_name": lambda e: e.get("resource", {}).get("labels", {}).get("task_name", ""),
    f'labels."{TASK_LABEL}"': lambda e: e.get("labels", {}).get(TASK_LABEL, ""),
    "timestamp": lambda e: timestamp_key(e.get("timestamp", "")),
    "severity": lambda e: SEVERITIES.index(e.get("severity", "DEFAULT")),
}
_STRING_OPS = ("=", "!=")
_ORDER_OPS = ("=", "!=", ">", ">=", "<", "<=")


def unparseable(text: str, column: int, token: str) -> ApiError:
    return ApiError("INVALID_ARGUMENT",
                    f"Unparseable filter: syntax error at line 1, column {column}, token '{token}'")


def unsupported(what: str) -> ApiError:
    return ApiError("INVALID_ARGUMENT", f"The emulator's entries:list does not support {what} in a filter "
                    "(supported: resource.type, resource.labels.job_id, resource.labels.task_name, "
                    f'labels."{TASK_LABEL}", timestamp, severity; AND, OR, parentheses).')


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        found = _TOKEN.match(text, pos)
        if not found or found.end() == pos:
            column = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise unparseable(text, column, text[column - 1])
        kind = found.lastgroup or "word"
        value = found.group(kind)
        out.append((kind, value, found.start(kind) + 1))
        pos = found.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        token = self.peek()
        if token is None:
            raise unparseable(self.text, len(self.text) + 1, "<EOF>")
        self.i += 1
        return token

    def expect(self, value: str) -> None:
        kind, got, column = self.take()
        if got != value:
            raise unparseable(self.text, column, got)

    def parse(self) -> Predicate:
        if not self.tokens:
            return lambda e: True
        predicate = self.conjunction()
        if self.peek() is not None:
            _, got, column = self.take()
            raise unparseable(self.text, column, got)
        return predicate

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while (token := self.peek()) is not None and token[1] != ")":
            if token == ("word", "AND", token[2]):
                self.take()
            parts.append(self.disjunction())
        return parts[0] if len(parts) == 1 else (lambda e: all(p(e) for p in parts))

    def disjunction(self) -> Predicate:
        parts = [self.primary()]
        while (token := self.peek()) is not None and token[:2] == ("word", "OR"):
            self.take()
            parts.append(self.primary())
        return parts[0] if len(parts) == 1 else (lambda e: any(p(e) for p in parts))

    def primary(self) -> Predicate:
        kind, value, column = self.take()
        if value == "(":
            if self.depth >= MAX_NESTING:
                raise ApiError("INVALID_ARGUMENT", f"filter: parentheses nested deeper than {MAX_NESTING} levels "
                               f"at column {column} (the emulator's limit)")
            self.depth += 1
            inner = self.conjunction()
            self.expect(")")
            self.depth -= 1
            return inner
        if kind != "word" or value in ("AND", "OR"):
            raise unparseable(self.text, column, value)
        if value in ("NOT", "-"):
            raise unsupported("NOT")
        if value not in _FIELDS:
            if self.peek() is None or self.peek()[0] != "op":  # a bare word: a global text search
                raise unsupported(f"the text search {value!r}")
            raise unsupported(f"the field {value!r}")
        _, op, op_column = self.take()
        allowed = _STRING_OPS if value not in ("timestamp", "severity") else _ORDER_OPS
        if op not in allowed:
            if op in ("(", ")"):
                raise unparseable(self.text, op_column, op)
            raise unsupported(f"the operator {op!r} on {value}")
        values = self.values(value)
        return _comparison(_FIELDS[value], op, values)

    def values(self, field: str) -> list[Any]:
        if self.peek() is not None and self.peek()[1] == "(":
            self.take()
            found = [self.value(field)]
            while (token := self.peek()) is not None and token[:2] == ("word", "OR"):
                self.take()
                found.append(self.value(field))
            self.expect(")")
            return found
        return [self.value(field)]

    def value(self, field: str) -> Any:
        kind, raw, column = self.take()
        if kind == "op":
            raise unparseable(self.text, column, raw)
        text = re.sub(r"\\(.)", r"\1", raw[1:-1]) if kind == "str" else raw
        if field == "timestamp":
            return timestamp_key(text)
        if field == "severity":
            if text.upper() not in SEVERITIES:
                raise ApiError("INVALID_ARGUMENT", f"Invalid severity value: {text}")
            return SEVERITIES.index(text.upper())
        return text


def _comparison(read: Callable[[Entry], Any], op: str, values: list[Any]) -> Predicate:
    tests = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
             ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}
    test = tests[op]
    if op == "!=":
        return lambda e: all(test(read(e), v) for v in values)
    return lambda e: any(test(read(e), v) for v in values)


def parse_log_filter(text: str) -> Predicate:
    """A predicate over LogEntry dicts, or the ApiError Cloud Logging (or the emulator) answers."""
    if len(text) > FILTER_LIMIT:
        raise ApiError("INVALID_ARGUMENT", f"filter is longer than {FILTER_LIMIT} characters "
                       f"({len(text)}).")
    return _Parser(text).parse()
