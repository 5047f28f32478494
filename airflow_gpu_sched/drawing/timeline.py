"""Timelines of training: per night (a DAG run), per training task, per attempt, the queued /
provisioning / running segments, with preemptions, fallbacks, resubmissions and cancellations
marked, and each attempt's strategy, region, GPU-hours and cost; laid out once, drawn as SVG.

One picture for every place that shows it (the rule of where things go is :func:`layout`):
the Airflow UI plugin (:mod:`airflow_gpu_sched.ui`, from the tasks' XCom results),
``airflow-gpu-sched timeline`` (an XCom result, or an emulator), ``make demo`` and the
emulator's ``/emulator/v1/timeline.svg`` (the emulator's job histories, which know every
restart's time). Sources build :class:`Night` values; :func:`layout` turns them into positioned
shapes (pure: the tests check that no label overlaps a bar and every preemption has a marker);
:func:`to_svg` writes those shapes out. The emulator's dashboard still uses :class:`Row` and
:func:`segments_from_history` for its per-job bars.

What the XCom can tell, and so what the picture claims: queued runs from createTime to the
first RUNNING the pollers observed (``running_since``; never ``startTime``, which real Vertex
sets at admission, while the job still waits) and includes VM provisioning (the API does not
time it apart); a bounded time (``times.exact`` false) is drawn where the poll saw it; the service's SPOT
restarts are counted as the poller saw them, without their times, so they are drawn as one
marker with their count at the attempt's end (the emulator's histories give each its time).

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from html import escape
from typing import Any, Iterable

# segment kind -> colour (also the dashboard's CSS classes)
COLOURS = {"queued": "#b0b7c3", "pending": "#f2b84b", "running": "#3fa35b", "preempted": "#d9463e",
           "cancelling": "#8c6bb1"}
_KIND = {"JOB_STATE_QUEUED": "queued", "JOB_STATE_PENDING": "pending", "JOB_STATE_RUNNING": "running",
         "JOB_STATE_CANCELLING": "cancelling"}
# what the legend calls each segment kind (a PENDING job is being provisioned)
SEGMENT_NAMES = {"queued": "queued", "pending": "provisioning", "running": "running",
                 "cancelling": "cancelling"}
# marker kind -> (colour, legend text)
MARKS = {"preempted": ("#d9463e", "preempted"),
         "fell back": ("#e07b00", "fell back (next step or region)"),
         "resubmitted": ("#2f6fd6", "resubmitted (same step)"),
         "cancelled": ("#333333", "cancelled"),
         "failed": ("#8b1a1a", "failed")}


# how an attempt ended (the XCom's outcome), in the words of its row; else its job state
OUTCOME_WORDS = {"preempted": "PREEMPTED", "capacity_timeout": "NO-CAPACITY", "quota_exceeded": "NO-QUOTA",
                 "error": "API-ERROR"}


@dataclass(frozen=True)
class Segment:
    kind: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Row:
    """One job's bar on the emulator's dashboard."""
    label: str
    strategy: str
    state: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Mark:
    kind: str  # a MARKS key
    time: datetime
    count: int = 1  # several preemptions at one place: the service's restarts, whose times are unknown
    note: str = ""


@dataclass(frozen=True)
class Attempt:
    label: str  # "#1", "trial 2"
    strategy: str
    region: str
    state: str  # without the JOB_STATE_ prefix
    segments: tuple[Segment, ...] = ()
    marks: tuple[Mark, ...] = ()
    waited_seconds: float | None = None
    run_seconds: float | None = None
    gpu_hours: float | None = None
    cost: float | None = None
    currency: str | None = None
    accelerator: str | None = None
    note: str = ""  # e.g. "no job: the pool stayed busy"

    @property
    def preemptions(self) -> int:
        return sum(m.count for m in self.marks if m.kind == "preempted")


@dataclass(frozen=True)
class Task:
    name: str
    attempts: tuple[Attempt, ...]
    note: str = ""  # instead of the totals, e.g. "deferred: no result yet"

    def total(self, field: str) -> float | None:
        values = [getattr(a, field) for a in self.attempts if getattr(a, field) is not None]
        return round(sum(values), 4) if values else None


@dataclass(frozen=True)
class Night:
    """One DAG run's training tasks."""
    title: str
    tasks: tuple[Task, ...]


# ---------------------------------------------------------------------------- sources


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


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


def _between(attempts: list[Attempt], ends: list[datetime | None]) -> list[Attempt]:
    """Marks, at the start of each attempt after the first, how it came: the plan fell back (another
    strategy or region) or resubmitted (the same step, after a SPOT job was preempted past its
    restarts). On the later attempt's row, so it never hides the earlier one's end marker."""
    out = attempts[:1]
    for index in range(1, len(attempts)):
        prev, attempt = attempts[index - 1], attempts[index]
        at = attempt.segments[0].start if attempt.segments else ends[index - 1]
        if at is not None:
            same = (prev.strategy, prev.region) == (attempt.strategy, attempt.region)
            mark = Mark("resubmitted", at, note=f"resubmitted after {prev.label} ({prev.state.lower()})") if same \
                else Mark("fell back", at, note=f"fell back from {prev.strategy} {prev.region} ({prev.state.lower()})")
            attempt = replace(attempt, marks=(mark, *attempt.marks))
        out.append(attempt)
    return out


def task_from_result(name: str, result: dict[str, Any]) -> Task:
    """A training task's XCom result (``attempts`` with times, outcome, restarts, GPU-hours, cost)."""
    attempts, ends = [], []
    raw = result.get("attempts") or []
    for number, a in enumerate(raw, 1):
        attempt, ended = _attempt_from_result(number, a, number == len(raw), result.get("currency"))
        attempts.append(attempt)
        ends.append(ended)
    return Task(name, tuple(_with_unmarked_preemptions(_between(attempts, ends), ends, result)))


def _attempt_from_result(number: int, a: dict[str, Any], last: bool,
                         currency: str | None) -> tuple[Attempt, datetime | None]:
    """One attempt of an XCom result, and when it ended."""
    # an older result has no running_since: then start_time, as it was recorded then
    started_key = "running_since" if "running_since" in a else "start_time"
    created, started, ended = (_time(a.get(k)) for k in ("create_time", started_key, "end_time"))
    state = (a.get("state") or "").removeprefix("JOB_STATE_")
    status = OUTCOME_WORDS.get(a.get("outcome") or "", state)
    segs = []
    if created and (started or ended):
        segs.append(Segment("queued", created, started or ended))
    if started and ended:
        segs.append(Segment("running", started, ended))
    restarts = int(a.get("restarts_observed") or 0)
    marks = _result_marks(a, ended, state, last, restarts) if ended is not None else []
    note = "" if a.get("job_name") else f"no job: {a.get('error') or state.lower()}"
    attempt = Attempt(f"#{number}", a.get("strategy") or "?", a.get("location") or "", status, tuple(segs),
                      tuple(marks), a.get("queued_seconds"), a.get("run_seconds"), a.get("gpu_hours"), a.get("cost"),
                      currency, a.get("accelerator_type"), note)
    return attempt, ended


def _result_marks(a: dict[str, Any], ended: datetime, state: str, last: bool, restarts: int) -> list[Mark]:
    """The markers at an ended attempt's end: preemptions and restarts, a cancel, the last failure."""
    marks = []
    if a.get("outcome") == "preempted":
        note = "preempted past the service's restarts"
        if restarts:
            note += f" ({restarts} restarts observed before, at times the API does not give)"
        marks.append(Mark("preempted", ended, restarts + 1, note))
    elif restarts:
        marks.append(Mark("preempted", ended, restarts,
                          f"{restarts} service restarts observed during the run (times not in the API)"))
    if state == "CANCELLED":
        marks.append(Mark("cancelled", ended, note=a.get("error") or "cancelled"))
    elif state == "FAILED" and a.get("outcome") in (None, "failed") and last:
        marks.append(Mark("failed", ended, note=a.get("error") or "failed"))
    return marks


def _with_unmarked_preemptions(attempts: list[Attempt], ends: list[datetime | None],
                               result: dict[str, Any]) -> list[Attempt]:
    """An XCom written before attempts carried their outcome: put the task's observed preemptions
    on its first SPOT attempt, so that none goes unmarked."""
    missing = int(result.get("preemptions") or 0) - sum(a.preemptions for a in attempts)
    spot = [i for i, a in enumerate(attempts) if a.strategy == "SPOT" and ends[i] is not None]
    if missing > 0 and spot:
        i = spot[0]
        mark = Mark("preempted", ends[i], missing, f"{missing} preemptions observed (times not in the XCom)")
        attempts[i] = replace(attempts[i], marks=(*attempts[i].marks, mark))
    return attempts


def night_from_results(title: str, results: Iterable[tuple[str, dict[str, Any]]]) -> Night:
    """``(task name, XCom result)`` pairs of one DAG run."""
    return Night(title, tuple(task_from_result(name, result) for name, result in results))


def attempt_from_history(label: str, strategy: str, region: str, history: list[tuple[str, datetime]],
                         now: datetime, *, restarts: int = 0, preempted_at_end: bool = False,
                         gpus: int = 0, accelerator: str | None = None, error: str | None = None) -> Attempt:
    """One job from its state history (the emulator knows each restart's time)."""
    segs = tuple(s for s in segments_from_history(history, now) if s.kind != "preempted")
    marks = []
    for index in range(1, len(history)):
        if history[index - 1][0] == "JOB_STATE_RUNNING" and _KIND.get(history[index][0]) in ("queued", "pending"):
            marks.append(Mark("preempted", history[index][1], note=f"service restart at {history[index][1]:%H:%M:%S}"))
    unseen = restarts - len(marks)  # restarts the job never showed (the "invisible" variant)
    state = history[-1][0].removeprefix("JOB_STATE_") if history else ""
    end = history[-1][1] if history and history[-1][0] not in _KIND else None
    if end is not None:
        marks += _end_marks(end, state, preempted_at_end, unseen, error)
    started = next((t for s, t in history if s == "JOB_STATE_RUNNING"), None)
    created = history[0][1] if history else None
    ran = sum((s.end - s.start).total_seconds() for s in segs if s.kind == "running")
    waited = ((started or end or now) - created).total_seconds() if created else None
    status = "PREEMPTED" if preempted_at_end else state
    return Attempt(label, strategy, region, status, segs, tuple(marks), waited, ran,
                   round(gpus * ran / 3600, 4), None, None, accelerator)


def _end_marks(end: datetime, state: str, preempted_at_end: bool, unseen: int, error: str | None) -> list[Mark]:
    """The markers at a job's end: preempted (past its restarts, or restarts it never showed),
    cancelled, failed."""
    marks = []
    if preempted_at_end or unseen > 0:
        marks.append(Mark("preempted", end, int(preempted_at_end) + max(unseen, 0),
                          error or "preempted past the service's restarts"))
    if state == "CANCELLED":
        marks.append(Mark("cancelled", end, note=error or "cancelled"))
    elif state == "FAILED" and not preempted_at_end:
        marks.append(Mark("failed", end, note=error or "failed"))
    return marks


def task_from_attempts(name: str, attempts: list[Attempt]) -> Task:
    """A task's jobs in the order they were made, with the fallbacks and resubmissions between them."""
    ends = [max((m.time for m in a.marks), default=None) or (a.segments[-1].end if a.segments else None)
            for a in attempts]
    return Task(name, tuple(_between(list(attempts), ends)))


# ---------------------------------------------------------------------------- layout

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
    texts: list[Text] = [Text(MARGIN, MARGIN + 15, title, "title")] if title else []
    boxes: list[Box] = []
    glyphs: list[Glyph] = []
    rows: list[tuple[str, str, str]] = []
    y = MARGIN + 15 + 14 if title else MARGIN - 6
    widest = right + GAP + info_w + MARGIN
    for night in nights:
        times = [t for task in night.tasks for a in task.attempts
                 for t in [*(x for s in a.segments for x in (s.start, s.end)), *(m.time for m in a.marks)]]
        start, end = (min(times), max(times)) if times else (None, None)
        span = max((end - start).total_seconds(), 1.0) if times else 1.0
        head = night.title + (f"   {start:%Y-%m-%d %H:%M} -> {end:%H:%M} UTC ({_minutes(span)})" if times else "")
        y += ROW
        texts.append(Text(MARGIN, y - 8, head, "head"))
        widest = max(widest, MARGIN + text_width(head, "head") + MARGIN)

        def x_of(t: datetime) -> float:
            return left + bar_w * (t - start).total_seconds() / span

        first_tick = len(boxes)
        if times:  # the axis: ticks on round minutes, labelled HH:MM
            y += 16
            step = _tick_step(span, bar_w)
            tick = datetime.fromtimestamp((start.timestamp() // step + 1) * step, start.tzinfo)
            while tick <= end:
                texts.append(Text(x_of(tick), y - 4, f"{tick:%H:%M}", "tick", "middle"))
                boxes.append(Box(x_of(tick), y, 0.6, 0, "tick"))
                tick += timedelta(seconds=step)
        for task in night.tasks:
            y += ROW
            texts.append(Text(MARGIN, y - 8, task.name, "task"))
            texts.append(Text(right + GAP, y - 8, task_info(task), "info"))
            for a in task.attempts:
                y += ROW
                top = y - ROW + (ROW - BAR_H) - 4
                rows.append((night.title, task.name, a.label))
                texts.append(Text(MARGIN, y - 8, attempt_label(a), "label"))
                texts.append(Text(right + GAP, y - 8, _attempt_right(a), "info"))
                boxes.append(Box(left, top, bar_w, BAR_H, "track"))
                for s in a.segments:
                    x = x_of(s.start)
                    w = max(x_of(s.end) - x, 1.5)
                    boxes.append(Box(x, top, min(w, right - x), BAR_H, s.kind,
                                     f"{a.label} {SEGMENT_NAMES.get(s.kind, s.kind)} "
                                     f"{s.start:%H:%M:%S}-{s.end:%H:%M:%S}"))
                for m in a.marks:
                    glyphs.append(Glyph(min(x_of(m.time), right), top, m.kind, m.count,
                                        f"{a.label} {MARKS[m.kind][1]}" + (f" x{m.count}" if m.count > 1 else "")
                                        + (f": {m.note}" if m.note else ""), len(rows) - 1))
        for i in range(first_tick, len(boxes)):  # the ticks run down the whole night
            if boxes[i].kind == "tick":
                boxes[i] = Box(boxes[i].x, boxes[i].y, boxes[i].w, y - boxes[i].y, "tick")
    # the legend, wrapped to the width
    y += ROW + 6
    x = MARGIN
    entries = [("seg", kind, SEGMENT_NAMES[kind]) for kind in ("queued", "pending", "running")] + [
        ("mark", kind, text) for kind, (_, text) in MARKS.items()]
    for what, kind, text in entries:
        w = 18 + text_width(text, "legend") + 18
        if x + w > widest - MARGIN:
            x, y = MARGIN, y + 20
        if what == "seg":
            boxes.append(Box(x, y - 10, 12, 12, kind))
        else:
            glyphs.append(Glyph(x + (13 if kind == "fell back" else 6), y - (6 if kind == "preempted" else 10),
                                kind, 1, text, -1))
        texts.append(Text(x + 18, y, text, "legend"))
        x += w
    y += 20
    note = ("times UTC; queued includes VM provisioning where the API does not time it apart; GPU-hours "
            "and cost are estimates from the jobs' timestamps and your price table, not Google's bill")
    texts.append(Text(MARGIN, y, note, "note"))
    widest = max(widest, MARGIN + text_width(note, "note") + MARGIN)
    return Picture(round(widest), round(y + MARGIN), left, right, tuple(texts), tuple(boxes), tuple(glyphs),
                   tuple(rows))


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
