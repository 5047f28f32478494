"""Timelines of jobs: queued / provisioning / running / preempted segments, and an SVG of them.

One picture for three sources: the emulator's job histories (its dashboard and
``GET /emulator/v1/timeline``), and a training task's XCom result (``attempts`` with their
create/start/end times), via ``airflow-gpu-sched timeline``.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

# segment kind -> colour (also the dashboard's CSS classes)
COLOURS = {"queued": "#b0b7c3", "pending": "#f2b84b", "running": "#3fa35b", "preempted": "#d9463e",
           "cancelling": "#8c6bb1"}
_KIND = {"JOB_STATE_QUEUED": "queued", "JOB_STATE_PENDING": "pending", "JOB_STATE_RUNNING": "running",
         "JOB_STATE_CANCELLING": "cancelling"}


@dataclass(frozen=True)
class Segment:
    kind: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Row:
    label: str
    strategy: str
    state: str
    segments: tuple[Segment, ...]


def segments_from_history(history: list[tuple[str, datetime]], now: datetime) -> tuple[Segment, ...]:
    """State changes -> segments; a RUNNING -> QUEUED/PENDING change marks a preemption."""
    out: list[Segment] = []
    for index, (state, start) in enumerate(history):
        end = history[index + 1][1] if index + 1 < len(history) else now
        kind = _KIND.get(state)
        if kind is None:  # terminal: nothing after it
            continue
        if index > 0 and history[index - 1][0] == "JOB_STATE_RUNNING" and kind in ("queued", "pending"):
            out.append(Segment("preempted", start, start))
        out.append(Segment(kind, start, end))
    return tuple(out)


def rows_from_result(result: dict[str, Any]) -> list[Row]:
    """A training task's XCom result: one row per attempt (queued until start, then running)."""
    rows = []
    for number, attempt in enumerate(result.get("attempts", []), 1):
        times = [datetime.fromisoformat(t.replace("Z", "+00:00")) if t else None
                 for t in (attempt.get("create_time"), attempt.get("start_time"), attempt.get("end_time"))]
        created, started, ended = times
        segs = []
        if created and (started or ended):
            segs.append(Segment("queued", created, started or ended))
        if started and ended:
            segs.append(Segment("running", started, ended))
        rows.append(Row(f"attempt {number} ({attempt.get('location') or ''})", attempt["strategy"],
                        (attempt.get("state") or "").removeprefix("JOB_STATE_"), tuple(segs)))
    return rows


def to_svg(rows: list[Row], title: str = "training timeline") -> str:
    """A plain SVG (no dependencies): one bar per row on a shared time axis."""
    label_w, bar_w, row_h, top = 330, 640, 26, 40
    times = [t for row in rows for seg in row.segments for t in (seg.start, seg.end)]
    start, end = (min(times), max(times)) if times else (None, None)
    span = max((end - start).total_seconds(), 1.0) if times else 1.0
    height = top + row_h * len(rows) + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 20}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<text x="10" y="22" font-size="15" font-weight="bold">{escape(title)}</text>']
    for index, row in enumerate(rows):
        y = top + index * row_h
        parts.append(f'<text x="10" y="{y + 16}">{escape(row.label[:34])}  {escape(row.strategy)}  '
                     f'{escape(row.state)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="16" fill="#f1f3f6"/>')
        for seg in row.segments:
            x = label_w + bar_w * (seg.start - start).total_seconds() / span
            w = max(bar_w * (seg.end - seg.start).total_seconds() / span, 2.0)
            parts.append(f'<rect class="{seg.kind}" x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="16" '
                         f'fill="{COLOURS[seg.kind]}"><title>{seg.kind}: {seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}'
                         '</title></rect>')
    legend_y = top + row_h * len(rows) + 20
    for index, (kind, colour) in enumerate(COLOURS.items()):
        x = label_w + index * 110
        parts.append(f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{x + 16}" y="{legend_y}">{kind}</text>')
    if times:
        parts.append(f'<text x="10" y="{legend_y}">{start:%Y-%m-%d %H:%M} → {end:%H:%M} '
                     f'({span / 60:.0f} min)</text>')
    parts.append("</svg>")
    return "\n".join(parts)
