"""The plugin's page, pure: DAG runs with their training tasks' XCom results -> nights ->
HTML (the shared timeline SVG, then a table of who waited for GPUs, how long, on what, at what
cost). No I/O here: :mod:`airflow_gpu_sched.ui.source` fetches, this only lays out.

May import: vertex, ui; never airflow.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from airflow_gpu_sched.ui.source import RunRecord
from airflow_gpu_sched.vertex.timeline import Night, Task, svg, task_from_result

CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2430;background:#fff}
h1{font-size:18px;margin:0 0 6px} p.scope{margin:0 0 12px;color:#5b6270;font-size:13px}
p.scope a{margin-right:10px} .timeline{overflow-x:auto;border:1px solid #e3e6ea;margin-bottom:18px}
table{border-collapse:collapse;font-size:13px} th,td{padding:3px 10px;border-bottom:1px solid #e3e6ea;text-align:left}
th{background:#f6f7f9} td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.timeline svg{max-width:100%;height:auto;display:block} .error{color:#c0392b}
"""


def task_name(task_id: str, map_index: int) -> str:
    return task_id if map_index < 0 else f"{task_id}[{map_index}]"


def nights_of(runs: list[RunRecord]) -> list[Night]:
    """Each run's training tasks: from their results, or a note when there is none (yet)."""
    out = []
    for run in runs:
        tasks = []
        for t in run.tasks:
            name = task_name(t.task_id, t.map_index)
            if t.result is not None:
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


def render(runs: list[RunRecord], heading: str, links: list[tuple[str, str]], error: str | None = None) -> str:
    nights = nights_of(runs)
    body = f'<p class="error">{escape(error)}</p>' if error else ""
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
