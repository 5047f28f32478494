"""Timelines of training: per night (a DAG run), per training task, per attempt, the queued /
provisioning / running segments, with preemptions, fallbacks, resubmissions and cancellations
marked, and each attempt's strategy, region, GPU-hours and cost; laid out once, drawn as SVG
(:mod:`timeline_svg`: the layout and the SVG; this module: the picture's data and its sources).

One picture for every place that shows it (the rule of where things go is ``timeline_svg.layout``):
the Airflow UI plugin (:mod:`airflow_gpu_sched.ui`, from the tasks' XCom results),
``airflow-gpu-sched timeline`` (an XCom result, or an emulator), ``make demo`` and the
emulator's ``/emulator/v1/timeline.svg`` (the emulator's job histories, which know every
restart's time). Sources build :class:`Night` values; ``layout`` turns them into positioned
shapes (pure: the tests check that no label overlaps a bar and every preemption has a marker);
``to_svg`` writes those shapes out. The emulator's dashboard still uses :class:`Row` and
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
from datetime import datetime
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
