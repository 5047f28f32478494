"""The training timeline laid out and drawn: :func:`layout` turns nights (:mod:`timeline`'s
data) into positioned shapes, labels in measured columns, never over a bar (pure: the tests
check that no label overlaps a bar and every preemption has a marker); :func:`to_svg` writes
those shapes out; :func:`svg` does both.

May import: drawing; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from typing import Callable

from airflow_gpu_sched.drawing.timeline import COLOURS, MARKS, SEGMENT_NAMES, Attempt, Night, Task

CHAR = 0.61  # advance of DejaVu Sans Mono (the SVG's font) per pixel of font size, rounded up
FONT = {"title": 15, "head": 12, "task": 12, "label": 12, "info": 12, "tick": 10, "legend": 12, "count": 10,
        "note": 11}
ROW, BAR_H, MARGIN, GAP = 26, 12, 12, 14


def text_width(text: str, cls: str) -> float:
    """Width in pixels of ``text`` in the SVG's monospace font at its class's size."""
    return len(text) * FONT[cls] * CHAR


@dataclass(frozen=True)
class Text:
    x: float
    y: float  # baseline
    text: str
    cls: str
    anchor: str = "start"

    @property
    def box(self) -> tuple[float, float, float, float]:
        """(left, top, right, bottom), from the font's advance and size."""
        w, size = text_width(self.text, self.cls), FONT[self.cls]
        left = self.x - (w / 2 if self.anchor == "middle" else w if self.anchor == "end" else 0)
        return left, self.y - size * 0.8, left + w, self.y + size * 0.25


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float
    kind: str  # a segment kind, or "track"
    tip: str = ""


@dataclass(frozen=True)
class Glyph:
    x: float
    y: float  # the bar's top
    kind: str  # a MARKS key
    count: int
    tip: str
    row: int  # index into Picture.rows


@dataclass(frozen=True)
class Picture:
    width: float
    height: float
    bars_left: float
    bars_right: float
    texts: tuple[Text, ...]
    boxes: tuple[Box, ...]
    glyphs: tuple[Glyph, ...]
    rows: tuple[tuple[str, str, str], ...]  # (night, task, attempt label) of each attempt row, for tests


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _money(value: float | None, currency: str | None) -> str:
    return "cost -" if value is None else f"{value:,.2f} {currency or ''}".rstrip()


def attempt_info(a: Attempt) -> str:
    gpu = "-" if a.gpu_hours is None else f"{a.gpu_hours:.2f}"
    return (f"{a.state or '?':<11} queued {_minutes(a.waited_seconds):>6}  ran {_minutes(a.run_seconds):>6}  "
            f"{gpu:>6} GPU-h  {_money(a.cost, a.currency)}")


def task_info(t: Task) -> str:
    if t.note:
        return t.note
    accelerators = sorted({a.accelerator for a in t.attempts if a.accelerator})
    on = f" for {'/'.join(accelerators)}" if accelerators else ""
    gpu = t.total("gpu_hours")
    cost = t.total("cost")
    currency = next((a.currency for a in t.attempts if a.currency), None)
    return (f"waited {_minutes(t.total('waited_seconds'))}{on}, {len(t.attempts)} attempt"
            f"{'s' if len(t.attempts) != 1 else ''}, {0 if gpu is None else gpu:.2f} GPU-h, {_money(cost, currency)}")


def _attempt_right(a: Attempt) -> str:
    """The right column of an attempt's row: its figures, or why it has none (an error, cut short)."""
    if not a.note:
        return attempt_info(a)
    return a.note if len(a.note) <= 100 else a.note[:97] + "..."


def attempt_label(a: Attempt) -> str:
    return f"  {a.label} {a.strategy} {a.region}".rstrip()


def _tick_step(span_seconds: float, bar_w: float) -> float:
    for minutes in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440):
        if span_seconds / (minutes * 60) <= max(bar_w / 80, 2):
            return minutes * 60.0
    return 2880 * 60.0


@dataclass
class _Canvas:
    """The shapes placed so far and the pen's height (what :func:`layout` builds, in order)."""

    left: float  # the bars' column, from left to right
    right: float
    bar_w: float
    y: float
    widest: float
    texts: list[Text]
    boxes: list[Box] = field(default_factory=list)
    glyphs: list[Glyph] = field(default_factory=list)
    rows: list[tuple[str, str, str]] = field(default_factory=list)


def layout(nights: list[Night], title: str = "training timeline", bar_w: float = 560) -> Picture:
    """Where every label, bar and marker goes. Labels sit in a left column as wide as the longest
    one, figures in a right column as wide as the longest; bars only between the two."""
    labels = [t.name for n in nights for t in n.tasks] + [attempt_label(a) for n in nights for t in n.tasks
                                                          for a in t.attempts]
    infos = [task_info(t) for n in nights for t in n.tasks] + [_attempt_right(a) for n in nights for t in n.tasks
                                                                for a in t.attempts]
    label_w = max([text_width(s, "label") for s in labels] + [80])
    info_w = max([text_width(s, "info") for s in infos] + [80])
    left = MARGIN + label_w + GAP
    right = left + bar_w
    canvas = _Canvas(left, right, bar_w, y=MARGIN + 15 + 14 if title else MARGIN - 6,
                     widest=right + GAP + info_w + MARGIN,
                     texts=[Text(MARGIN, MARGIN + 15, title, "title")] if title else [])
    for night in nights:
        _draw_night(canvas, night)
    _draw_legend(canvas)
    canvas.y += 20
    note = ("times UTC; queued includes VM provisioning where the API does not time it apart; GPU-hours "
            "and cost are estimates from the jobs' timestamps and your price table, not Google's bill")
    canvas.texts.append(Text(MARGIN, canvas.y, note, "note"))
    widest = max(canvas.widest, MARGIN + text_width(note, "note") + MARGIN)
    return Picture(round(widest), round(canvas.y + MARGIN), left, right, tuple(canvas.texts), tuple(canvas.boxes),
                   tuple(canvas.glyphs), tuple(canvas.rows))


def _draw_night(canvas: _Canvas, night: Night) -> None:
    """A night's heading, its time axis, and a row per task and per attempt."""
    times = [t for task in night.tasks for a in task.attempts
             for t in [*(x for s in a.segments for x in (s.start, s.end)), *(m.time for m in a.marks)]]
    start, end = (min(times), max(times)) if times else (None, None)
    span = max((end - start).total_seconds(), 1.0) if times else 1.0
    head = night.title + (f"   {start:%Y-%m-%d %H:%M} -> {end:%H:%M} UTC ({_minutes(span)})" if times else "")
    canvas.y += ROW
    canvas.texts.append(Text(MARGIN, canvas.y - 8, head, "head"))
    canvas.widest = max(canvas.widest, MARGIN + text_width(head, "head") + MARGIN)

    def x_of(t: datetime) -> float:
        return canvas.left + canvas.bar_w * (t - start).total_seconds() / span

    first_tick = len(canvas.boxes)
    if times:  # the axis: ticks on round minutes, labelled HH:MM
        canvas.y += 16
        step = _tick_step(span, canvas.bar_w)
        tick = datetime.fromtimestamp((start.timestamp() // step + 1) * step, start.tzinfo)
        while tick <= end:
            canvas.texts.append(Text(x_of(tick), canvas.y - 4, f"{tick:%H:%M}", "tick", "middle"))
            canvas.boxes.append(Box(x_of(tick), canvas.y, 0.6, 0, "tick"))
            tick += timedelta(seconds=step)
    for task in night.tasks:
        canvas.y += ROW
        canvas.texts.append(Text(MARGIN, canvas.y - 8, task.name, "task"))
        canvas.texts.append(Text(canvas.right + GAP, canvas.y - 8, task_info(task), "info"))
        for a in task.attempts:
            _draw_attempt(canvas, night, task, a, x_of)
    boxes = canvas.boxes
    for i in range(first_tick, len(boxes)):  # the ticks run down the whole night
        if boxes[i].kind == "tick":
            boxes[i] = Box(boxes[i].x, boxes[i].y, boxes[i].w, canvas.y - boxes[i].y, "tick")


def _draw_attempt(canvas: _Canvas, night: Night, task: Task, a: Attempt, x_of: Callable[[datetime], float]) -> None:
    """An attempt's row: its label and figures, its track, segments and markers."""
    right = canvas.right
    canvas.y += ROW
    top = canvas.y - ROW + (ROW - BAR_H) - 4
    canvas.rows.append((night.title, task.name, a.label))
    canvas.texts.append(Text(MARGIN, canvas.y - 8, attempt_label(a), "label"))
    canvas.texts.append(Text(right + GAP, canvas.y - 8, _attempt_right(a), "info"))
    canvas.boxes.append(Box(canvas.left, top, canvas.bar_w, BAR_H, "track"))
    for s in a.segments:
        x = x_of(s.start)
        w = max(x_of(s.end) - x, 1.5)
        canvas.boxes.append(Box(x, top, min(w, right - x), BAR_H, s.kind,
                                f"{a.label} {SEGMENT_NAMES.get(s.kind, s.kind)} "
                                f"{s.start:%H:%M:%S}-{s.end:%H:%M:%S}"))
    for m in a.marks:
        canvas.glyphs.append(Glyph(min(x_of(m.time), right), top, m.kind, m.count,
                                   f"{a.label} {MARKS[m.kind][1]}" + (f" x{m.count}" if m.count > 1 else "")
                                   + (f": {m.note}" if m.note else ""), len(canvas.rows) - 1))


def _draw_legend(canvas: _Canvas) -> None:
    """The legend, wrapped to the width."""
    canvas.y += ROW + 6
    x = MARGIN
    entries = [("seg", kind, SEGMENT_NAMES[kind]) for kind in ("queued", "pending", "running")] + [
        ("mark", kind, text) for kind, (_, text) in MARKS.items()]
    for what, kind, text in entries:
        w = 18 + text_width(text, "legend") + 18
        if x + w > canvas.widest - MARGIN:
            x, canvas.y = MARGIN, canvas.y + 20
        if what == "seg":
            canvas.boxes.append(Box(x, canvas.y - 10, 12, 12, kind))
        else:
            canvas.glyphs.append(Glyph(x + (13 if kind == "fell back" else 6),
                                       canvas.y - (6 if kind == "preempted" else 10), kind, 1, text, -1))
        canvas.texts.append(Text(x + 18, canvas.y, text, "legend"))
        x += w


# ---------------------------------------------------------------------------- SVG

_STYLE = ("text{font-family:'DejaVu Sans Mono',monospace;fill:#1f2430}"
          + "".join(f".t-{cls}{{font-size:{size}px}}" for cls, size in FONT.items())
          + ".t-title,.t-head,.t-task{font-weight:bold}.t-tick,.t-note{fill:#5b6270}.t-count{font-weight:bold}")


def _glyph(g: Glyph) -> str:
    colour = MARKS[g.kind][0]
    x, y = g.x, g.y
    tip = f"<title>{escape(g.tip)}</title>"
    if g.kind == "preempted":  # a triangle pointing down at the bar, and a line through it
        shape = (f'<path d="M{x - 5:.1f},{y - 7:.1f} L{x + 5:.1f},{y - 7:.1f} L{x:.1f},{y:.1f} Z" fill="{colour}"/>'
                 f'<rect x="{x - 1:.1f}" y="{y:.1f}" width="2" height="{BAR_H}" fill="{colour}"/>')
    elif g.kind == "fell back":  # an arrow into the attempt's bar from the left
        c = y + BAR_H / 2
        shape = (f'<path d="M{x - 12:.1f},{c:.1f} L{x - 4:.1f},{c:.1f}" stroke="{colour}" stroke-width="2.5"/>'
                 f'<path d="M{x - 6:.1f},{c - 6:.1f} L{x + 1:.1f},{c:.1f} L{x - 6:.1f},{c + 6:.1f} Z" fill="{colour}"/>')
    elif g.kind == "resubmitted":  # a ring
        shape = f'<circle cx="{x:.1f}" cy="{y + BAR_H / 2:.1f}" r="5" fill="white" stroke="{colour}" stroke-width="2.5"/>'
    elif g.kind == "cancelled":  # a cross
        c = y + BAR_H / 2
        shape = (f'<path d="M{x - 5:.1f},{c - 5:.1f} L{x + 5:.1f},{c + 5:.1f} M{x - 5:.1f},{c + 5:.1f} '
                 f'L{x + 5:.1f},{c - 5:.1f}" stroke="{colour}" stroke-width="2.5"/>')
    else:  # failed: a square
        shape = (f'<rect x="{x - 5:.1f}" y="{y + BAR_H / 2 - 5:.1f}" width="10" height="10" fill="{colour}" '
                 'stroke="white" stroke-width="1"/>')
    count = ""
    if g.count > 1:
        count = f'<text class="t-count" x="{x + 7:.1f}" y="{y - 1:.1f}" fill="{colour}">x{g.count}</text>'
    return f'<g class="mark {g.kind.replace(" ", "-")}" data-count="{g.count}">{tip}{shape}{count}</g>'


def to_svg(picture: Picture) -> str:
    """The picture as a standalone SVG (no scripts, no external resources)."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{picture.width}" height="{picture.height}" '
             f'viewBox="0 0 {picture.width} {picture.height}"><style>{_STYLE}</style>',
             f'<rect width="{picture.width}" height="{picture.height}" fill="white"/>']
    for b in picture.boxes:
        if b.kind == "tick":
            parts.append(f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w}" height="{b.h:.1f}" fill="#d5d9e0"/>')
        elif b.kind == "track":
            parts.append(f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h}" fill="#f1f3f6"/>')
        else:
            tip = f"<title>{escape(b.tip)}</title>" if b.tip else ""
            parts.append(f'<rect class="{b.kind}" x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h}" '
                         f'fill="{COLOURS[b.kind]}">{tip}</rect>')
    for t in picture.texts:
        anchor = f' text-anchor="{t.anchor}"' if t.anchor != "start" else ""
        parts.append(f'<text class="t-{t.cls}" x="{t.x:.1f}" y="{t.y:.1f}"{anchor} xml:space="preserve">'
                     f'{escape(t.text)}</text>')
    parts.extend(_glyph(g) for g in picture.glyphs)
    parts.append("</svg>")
    return "\n".join(parts)


def svg(nights: list[Night], title: str = "training timeline") -> str:
    return to_svg(layout(nights, title))
