"""Rendering cannot change a job's structure: parse first, then render each string value.

``job_spec`` (a .json/.yaml file or text) and a ``worker_pool_specs`` string used to be
rendered by Jinja as text and parsed afterwards, so a value from ``dag_run.conf`` holding a
quote and a newline (``1"]\\n command: ["sh", ...] #``) rewrote the job around it. Here the
text is parsed (JSON or YAML) before anything is rendered, then every string value is rendered
on its own: whatever a value renders to stays that one string, in that one place. Keys are
never rendered. A string value must render to a scalar (a native-object DAG may turn
``"{{ params.n }}"`` into a number), never to a list or a mapping.

The one exception, kept because the value then comes whole from where the DAG author points it:
a field whose whole text is a single ``{{ ... }}`` expression (``"{{ ti.xcom_pull('pools') }}"``)
is rendered first and its result parsed, as before.

May import: vertex, orchestration; airflow only inside functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_gpu_sched.vertex.rules import Violation

TEMPLATE_FILE_EXT = (".json", ".yaml", ".yml")
_WHOLE = re.compile(r"\A\s*\{\{(?:(?!\{\{|\}\}).)*\}\}\s*\Z", re.S)
_JINJA = re.compile(r"{{|{%|{#")

Render = Callable[[str], Any]


def is_whole_expression(text: str) -> bool:
    """``"{{ x }}"`` and nothing else: its value is the field's whole value."""
    return bool(_WHOLE.match(text))


def render_leaves(value: Any, render: Render, path: str) -> Any:
    """``value`` with every string value rendered, its structure (keys, nesting, lengths) kept."""
    if isinstance(value, str):
        if not _JINJA.search(value):
            return value
        out = render(value)
        if isinstance(out, (dict, list, tuple, set)):
            raise _invalid(path, f"a string value must render to a string or number, not a "
                                 f"{type(out).__name__} (rendering cannot add structure)")
        return out
    if isinstance(value, dict):
        return {k: render_leaves(v, render, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_leaves(v, render, f"{path}[{i}]") for i, v in enumerate(value)]
    return value  # numbers, booleans, None, models: nothing to render


def render_job_spec(value: Any, render: Render, read_file: Callable[[str], str]) -> Any:
    """``job_spec=`` rendered: a file path is read, the text parsed (JSON or YAML), then rendered."""
    if not isinstance(value, str):
        return render_leaves(value, render, "job_spec")
    if is_whole_expression(value):
        return render(value)  # its value is the body (or its text): parsed by parse_given_job
    if "\n" not in value and value.strip().endswith(TEMPLATE_FILE_EXT):
        value = read_file(value.strip())
    import yaml  # JSON is YAML too

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise _invalid("job_spec", f"is text that is neither JSON nor YAML before rendering ({' '.join(str(exc).split())}); "
                                   f"it is parsed first and each string value rendered after, so a "
                                   f"template goes inside a quoted string value") from None
    return render_leaves(parsed, render, "job_spec")


def render_worker_pool_specs(value: Any, render: Render) -> Any:
    """``worker_pool_specs=`` rendered: a JSON string is parsed first, then its values rendered."""
    if not isinstance(value, str):
        return render_leaves(value, render, "worker_pool_specs")
    if is_whole_expression(value):
        return render(value)  # JSON text (or a list) from where the DAG author points: parsed by _pools_from
    if not _JINJA.search(value):
        return value
    import json

    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise _invalid("worker_pool_specs", f"is a string that is not JSON before rendering ({exc}); it is "
                                            f"parsed first and each string value rendered after, so a "
                                            f"template goes inside a JSON string value") from None
    return render_leaves(parsed, render, "worker_pool_specs")


def _invalid(path: str, rule: str) -> Exception:
    from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec

    return InvalidTrainingSpec([Violation(path, rule)])


def plan_from_text(value: str) -> Any:
    """``plan=`` given as text, at DAG parse: JSON or YAML text is parsed now (a template inside
    a step's value is rendered later, value by value); a whole expression
    (``"{{ var.value.gpu_plan }}"``) or a ``.json``/``.yaml`` file name stays text until rendered
    (a file is read then, or by ``resolve_template_files``)."""
    if is_whole_expression(value) or _is_file_name(value):
        return value
    return _parse_plan_text(value)


def render_plan(value: Any, render: Render, read_file: Callable[[str], str]) -> Any:
    """The plan rendered: a file is read and parsed, then its values rendered; a whole expression
    renders to the plan (a list, or its JSON/YAML text: parsed); steps rendered value by value."""
    if isinstance(value, str) and is_whole_expression(value):
        out = render(value)
        return _parse_plan_text(out) if isinstance(out, str) else out
    if isinstance(value, str) and _is_file_name(value):
        value = _parse_plan_text(read_file(value.strip()))
    elif isinstance(value, str):
        value = _parse_plan_text(value)
    return render_leaves(value, render, "plan")


def _is_file_name(value: str) -> bool:
    return "\n" not in value and value.strip().endswith(TEMPLATE_FILE_EXT) and not _JINJA.search(value)


def _parse_plan_text(text: str) -> Any:
    import yaml  # JSON is YAML too

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _invalid("plan", f"is text that is neither JSON nor YAML ({' '.join(str(exc).split())}); a step's "
                               "templated value goes inside a quoted string") from None

