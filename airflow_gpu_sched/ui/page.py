"""The plugin's page, pure: DAG runs with their training tasks' XCom results -> nights ->
HTML (the shared timeline SVG, then a table of who waited for GPUs, how long, on what, at what
cost). No I/O here: :mod:`airflow_gpu_sched.ui.source` fetches, this only lays out.

May import: vertex, drawing, ui; never airflow.
"""

from __future__ import annotations

from dataclasses import replace
from html import escape
from typing import Any
from urllib.parse import quote

from airflow_gpu_sched.ui.source import RunRecord, TaskRecord
from airflow_gpu_sched.vertex.console import DEFAULT_DOMAIN, is_console_url
from airflow_gpu_sched.drawing.timeline import Night, Task, task_from_result
from airflow_gpu_sched.drawing.timeline_svg import svg

CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2430;background:#fff}
h1{font-size:18px;margin:0 0 6px} p.scope{margin:0 0 12px;color:#5b6270;font-size:13px}
p.scope a{margin-right:10px} .timeline{overflow-x:auto;border:1px solid #e3e6ea;margin-bottom:18px}
table{border-collapse:collapse;font-size:13px} th,td{padding:3px 10px;border-bottom:1px solid #e3e6ea;text-align:left}
th{background:#f6f7f9} td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.timeline svg{max-width:100%;height:auto;display:block} .error{color:#c0392b}
#failures{margin-bottom:18px} #failures td{vertical-align:top} #failures td.what{max-width:760px;overflow-wrap:anywhere} .said{color:#5b6270;margin-top:4px}
#failures pre{margin:6px 0 0;padding:6px;background:#f6f7f9;font-size:12px;max-width:760px;overflow-x:auto;white-space:pre-wrap}
"""
DEFAULT_CONSOLE = DEFAULT_DOMAIN  # when Airflow's [gpu_sched] console_domain is not set


def task_name(task_id: str, map_index: int) -> str:
    return task_id if map_index < 0 else f"{task_id}[{map_index}]"


def nights_of(runs: list[RunRecord]) -> list[Night]:
    """Each run's training tasks: from their results, or a note when there is none (yet)."""
    out = []
    for run in runs:
        tasks = []
        for t in run.tasks:
            name = task_name(t.task_id, t.map_index)
            failure = failure_of(t)
            if failure is not None:
                tasks.append(_failed_task(name, t, failure))
            elif t.result is not None:
                tasks.append(_task_or_note(name, t.result))
            else:
                why = "no result yet" if t.state in (None, "queued", "scheduled", "running", "deferred",
                                                     "up_for_retry", "restarting") else "no result (see the task log)"
                tasks.append(Task(name, (), note=f"{t.state or 'not started'}: {why}"))
        out.append(Night(f"{run.dag_id}  {run.run_id}  ({run.state or '?'})", tuple(tasks)))
    return out


def _task_or_note(name: str, result: dict) -> Task:
    """A task from its XCom result, or a row saying the result cannot be read: XCom is written by
    whatever ran the task, and one malformed value must not take the whole page down."""
    try:
        task = task_from_result(name, result)
        probe = [Night("", (task,))]
        waiting_rows(probe), svg(probe)  # what the page computes of it: fails here, not mid-page
        return task
    except Exception as exc:  # noqa: BLE001 - any shape of bad data; the row names the error type
        return Task(name, (), note=f"unreadable result ({type(exc).__name__}): see the task's XCom return_value")


def failure_of(task: TaskRecord) -> dict[str, Any] | None:
    """The ``failure`` block of a failed try's record (None: the task did not fail, or no record)."""
    failure = (task.result or {}).get("failure") if task.state != "success" else None
    return failure if isinstance(failure, dict) else None


def _text(value: Any, most: int = 300) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def _failed_task(name: str, record: TaskRecord, failure: dict[str, Any]) -> Task:
    """A failed task's row: its attempts as far as they went, its name saying how it failed."""
    kind = _text(failure.get("kind"), 60) or "error"
    task = _task_or_note(f"{name}  {(record.state or 'failed').upper()}: {kind}", record.result or {})
    if not task.attempts and not task.note:  # no job was ever made (a deadline, a quota): say why
        task = replace(task, note=_text(failure.get("message"), 100))
    return task


def failure_rows(runs: list[RunRecord], domain: str) -> list[tuple[str, str, str, str, str, str, str, list]]:
    """(run, task, state and try, error kind, message, Vertex AI says, last log lines, links): a
    row per task whose try failed. Links only to ``https://`` pages on the console's host:
    an XCom written by someone else (``javascript:...``, another site) gives no link."""
    rows = []
    for run in runs:
        for t in run.tasks:
            failure = failure_of(t)
            if failure is None:
                continue
            links = failure.get("links") if isinstance(failure.get("links"), dict) else {}
            links = [(str(k).replace("_", " "), v) for k, v in links.items() if is_console_url(v, domain)]
            attempt = f"{t.state or '?'}, try {_text(failure.get('try_number'), 10) or '?'}"
            rows.append((f"{run.dag_id}  {run.run_id}", task_name(t.task_id, t.map_index), attempt,
                         _text(failure.get("kind"), 60), _text(failure.get("message"), 2000),
                         _text(failure.get("detail"), 2000), _text(failure.get("log_tail"), 8000), links))
    return rows


def waiting_rows(nights: list[Night]) -> list[tuple[str, str, str, str, float, float, int, int, str]]:
    """(night, task, on what, strategies tried, waited s, GPU-h, preemptions, fallbacks, cost): longest wait first."""
    rows = []
    for night in nights:
        for task in night.tasks:
            if not task.attempts:
                continue
            on = "/".join(sorted({a.accelerator for a in task.attempts if a.accelerator})) or "-"
            tried = " > ".join(dict.fromkeys(f"{a.strategy} {a.region}".strip() for a in task.attempts))
            fallbacks = sum(1 for a in task.attempts for m in a.marks if m.kind == "fell back")
            preemptions = sum(a.preemptions for a in task.attempts)
            cost = task.total("cost")
            currency = next((a.currency for a in task.attempts if a.currency), "")
            rows.append((night.title, task.name, on, tried, task.total("waited_seconds") or 0.0,
                         task.total("gpu_hours") or 0.0, preemptions, fallbacks,
                         "-" if cost is None else f"{cost:,.2f} {currency}".strip()))
    return sorted(rows, key=lambda r: -r[4])


def render(runs: list[RunRecord], heading: str, links: list[tuple[str, str]], error: str | None = None,
           console_domain: str = DEFAULT_CONSOLE) -> str:
    nights = nights_of(runs)
    body = f'<p class="error">{escape(error)}</p>' if error else ""
    failed = failure_rows(runs, console_domain)
    if failed:
        rows = "".join(
            f'<tr class="failed"><td>{escape(r[0])}</td><td>{escape(r[1])}</td><td>{escape(r[2])}</td>'
            f'<td class="error">{escape(r[3])}</td><td class="what">{escape(r[4])}'
            + (f'<div class="said">Vertex AI says: {escape(r[5])}</div>' if r[5] else "")
            + (f"<pre>{escape(r[6])}</pre>" if r[6] else "")
            + "</td><td>" + " ".join(f'<a href="{escape(url)}" target="_blank" rel="noopener">{escape(text)}</a>'
                                     for text, url in r[7]) + "</td></tr>" for r in failed)
        body += ('<h2 style="font-size:15px">Failed</h2><table id="failures"><tr><th>run</th><th>task</th>'
                 f"<th>state</th><th>error</th><th>what happened</th><th>console</th></tr>{rows}</table>")
    trained = [n for n in nights if n.tasks]
    if trained:
        body += f'<div class="timeline">{svg(trained, "")}</div>'
        rows = "".join(
            f"<tr><td>{escape(r[0])}</td><td>{escape(r[1])}</td><td>{escape(r[2])}</td><td>{escape(r[3])}</td>"
            f'<td class="n">{r[4] / 60:.1f}</td><td class="n">{r[5]:.2f}</td><td class="n">{r[6]}</td>'
            f'<td class="n">{r[7]}</td><td class="n">{escape(r[8])}</td></tr>' for r in waiting_rows(trained))
        body += ('<h2 style="font-size:15px">Who waited for GPUs</h2><table id="waits"><tr><th>run</th><th>task</th>'
                 "<th>on</th><th>tried</th><th>waited min</th><th>GPU-h</th><th>preemptions</th><th>fallbacks</th>"
                 f"<th>cost</th></tr>{rows}</table>")
    elif not error:
        body += "<p>No training task in these runs.</p>"
    nav = " ".join(f'<a href="{escape(href)}">{escape(text)}</a>' for text, href in links)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(heading)}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(heading)}</h1>"
            f'<p class="scope">{nav}</p>{body}</body></html>')


def href(*parts: str, nights: int | None = None) -> str:
    """A link inside the plugin, relative to its root (``root`` ends with a slash)."""
    path = "/".join(quote(p, safe="") for p in parts)
    return path + (f"?nights={nights}" if nights else "")
