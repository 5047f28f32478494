"""How the listing commands print their rows: ``-o/--output table|json|yaml|plain``, as Airflow's
own CLI (``airflow dags list -o yaml``); ``--json`` stays as a deprecated alias of ``-o json``.

``table`` is for people (aligned, upper-case header, ``(none)`` when empty), ``plain`` for
``cut``/``awk`` (a header line and tab-separated cells, nothing when empty), ``json`` and
``yaml`` every field of every row (a list, ``[]`` when empty).

Every cell of ``table`` and ``plain`` comes from an endpoint or a DAG file, so none is printed
raw: control characters (C0, DEL, C1: an ESC or OSC sequence would drive the terminal, a CR or
LF would forge a row) and Unicode's bidirectional overrides are written as ``\\xNN`` /
``\\uNNNN`` (:func:`printable`). ``json`` escapes them itself; ``yaml`` quotes them.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, is_dataclass
from typing import Any, TextIO

FORMATS = ("table", "json", "yaml", "plain")
DEFAULT_FORMAT = "table"


class DeprecatedJson(argparse.Action):
    """``--json``: what ``-o json`` does, with a warning on stderr (stdout stays the JSON)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None):
        print("warning: --json is deprecated and will be removed; use -o json (--output json)", file=sys.stderr)
        setattr(namespace, self.dest, "json")


# (flags, argparse keywords), for both trees: `airflow-gpu-sched ...` and `airflow gpu-sched ...`
OUTPUT_ARGS = [
    (("-o", "--output"), {"choices": FORMATS, "default": DEFAULT_FORMAT, "metavar": "(table, json, yaml, plain)",
                          "help": "output format: table (default), json, yaml or plain (tab-separated)"}),
    # the same default here: argparse takes a shared dest's default from the first action added,
    # and Airflow's CLI adds the options sorted by name, --json before --output (issue 41)
    (("--json",), {"action": DeprecatedJson, "dest": "output", "default": DEFAULT_FORMAT,
                   "help": "deprecated: the same as -o json"}),
]


def emit(rows: list[Any], columns: list[str], fmt: str, out: TextIO | None = None) -> None:
    """Print ``rows`` (dataclasses or dicts) in ``fmt``; ``columns`` are the table's and plain's."""
    out = out or sys.stdout  # looked up at call time (tests and callers redirect it)
    dicts = [asdict(r) if is_dataclass(r) else dict(r) for r in rows]
    if fmt == "json":
        print(json.dumps(dicts, indent=2), file=out)
    elif fmt == "yaml":
        import yaml  # a dependency of ours and of Airflow's

        out.write(yaml.safe_dump(dicts, sort_keys=False, default_flow_style=False) if dicts else "[]\n")
    elif fmt == "plain":
        if dicts:
            print("\t".join(columns), file=out)
            for row in dicts:
                print("\t".join(_cell(row.get(c)) for c in columns), file=out)
    elif fmt == "table":
        print_table(dicts, columns, out)
    else:
        raise ValueError(f"output: {fmt!r} is not one of {', '.join(FORMATS)}")


def print_table(rows: list[dict[str, Any]], columns: list[str], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if not rows:
        print("(none)", file=out)
        return
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip(), file=out)
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)


def shorten(value: str | None, width: int) -> str | None:
    """``value`` cut to ``width`` characters, its end replaced by "…" when cut (a table cell)."""
    if value is None or len(value) <= width:
        return value
    return value[:width - 1] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return printable("; ".join(str(v) for v in value)) or "ok"
    return printable(str(value))


# C0 (tab, CR, LF, ESC...), DEL, C1 (CSI, OSC... as single code points), and the bidirectional
# overrides and isolates that reorder what a terminal shows (U+202A-202E, U+2066-2069)
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character written as an escape: safe to print on a terminal."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
