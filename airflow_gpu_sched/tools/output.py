"""How the listing commands print their rows: ``-o/--output table|json|yaml|plain``, as Airflow's
own CLI (``airflow dags list -o yaml``); ``--json`` stays as a deprecated alias of ``-o json``.

``table`` is for people (aligned, upper-case header, ``(none)`` when empty), ``plain`` for
``cut``/``awk`` (a header line and tab-separated cells, nothing when empty), ``json`` and
``yaml`` every field of every row (a list, ``[]`` when empty).

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, is_dataclass
from typing import Any, TextIO

FORMATS = ("table", "json", "yaml", "plain")


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
    (("-o", "--output"), {"choices": FORMATS, "default": "table", "metavar": "(table, json, yaml, plain)",
                          "help": "output format: table (default), json, yaml or plain (tab-separated)"}),
    (("--json",), {"action": DeprecatedJson, "dest": "output", "help": "deprecated: the same as -o json"}),
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
                print("\t".join(_cell(row.get(c)).replace("\t", " ") for c in columns), file=out)
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


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value) or "ok"
    return str(value)
