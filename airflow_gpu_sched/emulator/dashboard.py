"""The emulator's dashboard at ``/``: plain server-rendered HTML and CSS, refreshing itself.

Every job with its strategy, state and a timeline bar (queued / provisioning / running /
preempted), GPU capacity per accelerator and tier (used of total), and persistent resource
pools with their used replicas.

May import: vertex, drawing, emulator; never airflow.
"""

from __future__ import annotations

from html import escape

from airflow_gpu_sched.emulator.backend import Backend
from airflow_gpu_sched.drawing.timeline import COLOURS, Row

MAX_ROWS = 300
CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1f2430}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;width:100%} th,td{padding:4px 8px;border-bottom:1px solid #e3e6ea;text-align:left;font-size:13px}
th{background:#f6f7f9} td.bar{width:55%} .track{position:relative;height:14px;background:#f1f3f6}
.seg{position:absolute;top:0;height:14px} .legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
.SUCCEEDED{color:#2d7d46} .FAILED{color:#c0392b} .CANCELLED{color:#7f6a93}
.meter{background:#f1f3f6;width:160px;height:10px;display:inline-block} .meter b{display:block;height:10px;background:#3fa35b}
""" + "".join(f".{kind}{{background:{colour}}}" for kind, colour in COLOURS.items())


def _bar(row: Row, start, span: float) -> str:
    segs = []
    for seg in row.segments:
        left = 100 * (seg.start - start).total_seconds() / span
        width = max(100 * (seg.end - seg.start).total_seconds() / span, 0.4)
        segs.append(f'<div class="seg {seg.kind}" style="left:{left:.2f}%;width:{width:.2f}%" '
                    f'title="{seg.kind} {seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}"></div>')
    return f'<div class="track">{"".join(segs)}</div>'


def render(backend: Backend, refresh_seconds: int = 2) -> str:
    now = backend.clock.now()
    rows = backend.timeline_rows()[:MAX_ROWS]
    times = [t for row in rows for seg in row.segments for t in (seg.start, seg.end)]
    start = min(times) if times else now
    span = max((max(times + [now]) - start).total_seconds(), 1.0)
    job_rows = "".join(
        f'<tr class="job"><td>{escape(row.label)}</td><td>{escape(row.strategy)}</td>'
        f'<td class="{escape(row.state)}">{escape(row.state)}</td><td class="bar">{_bar(row, start, span)}</td></tr>'
        for row in rows) or '<tr><td colspan="4">no jobs yet</td></tr>'
    capacity_rows = ""
    for entry in backend.capacity.snapshot():
        for tier in ("standard", "spot", "flexStart"):
            used, total = entry[tier]["used"], entry[tier]["total"]
            pct = 100 * used / total if total else 0
            capacity_rows += (f'<tr class="capacity"><td>{escape(entry["location"])}</td>'
                              f'<td>{escape(entry["acceleratorType"])}</td><td>{tier}</td>'
                              f'<td><span class="meter"><b style="width:{pct:.0f}%"></b></span> {used} of {total} '
                              f'used, {total - used} free</td></tr>')
    pool_rows = ""
    for record in backend.resources.values():
        resource = record.resource
        for pool in resource.resource_pools:
            pool_rows += (f'<tr class="pool"><td>{escape(resource.name or "")}</td>'
                          f'<td>{escape(resource.state.value if resource.state else "")}</td>'
                          f'<td>{escape(pool.id or "")}</td><td>{pool.used_replica_count or 0} of {pool.capacity} '
                          f'replicas used</td></tr>')
    legend = "".join(f'<span><i class="{kind}"></i>{kind}</span>' for kind in COLOURS)
    stats = backend.stats
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh_seconds}">
<title>Vertex AI emulator</title><style>{CSS}</style></head>
<body><h1>Vertex AI emulator</h1>
<p>emulated time {now:%Y-%m-%d %H:%M:%S} UTC (x{backend.clock.speed:g}) · jobs created
{sum(stats["jobsCreated"].values())} · preemptions {stats["preemptions"]} · cancels {stats["cancels"]}
· API requests {sum(stats["requests"].values())}</p>
<h2>Jobs</h2><div class="legend">{legend}</div>
<table id="jobs"><tr><th>job</th><th>strategy</th><th>state</th><th>timeline</th></tr>{job_rows}</table>
<h2>GPU capacity</h2>
<table id="capacity"><tr><th>location</th><th>accelerator</th><th>tier</th><th>GPUs</th></tr>{capacity_rows}</table>
<h2>Persistent resources</h2>
<table id="pools"><tr><th>resource</th><th>state</th><th>pool</th><th>replicas</th></tr>{pool_rows or
'<tr><td colspan="4">none</td></tr>'}</table>
</body></html>"""
