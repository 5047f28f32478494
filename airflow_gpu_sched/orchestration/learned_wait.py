"""``max_wait_duration="observed"``: a FLEX_START wait learned from the waits this installation
observed for that region and accelerator (pure; the history is :mod:`.observed`'s).

The rule (docs/cost.md, "Learned waits"):

- Samples: the region's last :data:`observed.PER_REGION` observations for the accelerator, none
  older than :data:`observed.MAX_AGE`, FLEX_START ones only when there are any (a STANDARD
  stockout says little about the DWS queue). A job that reached RUNNING is a sample of how long
  capacity takes when it comes; one that never did (its wait expired, a stockout) is counted and
  logged but is no sample: waiting longer there did not help, so it must not lengthen the wait
  (it would only burn the time the plan's next steps need before the deadline).
- Wait: the :data:`QUANTILE` quantile of the samples (nearest rank) x :data:`HEADROOM`, at least
  :data:`MIN_WAIT`, at most the user's max (``"observed:<max>"``; default 1 day, the service's
  own default). The plan's deadline clips it again when the job is submitted (as any wait).
- With a deadline, the learned waits share the plan's slack (:func:`share_slack`): the time
  left less the run, less what the positions tried before the last step may take (their
  bounds) and the last step's own time to RUNNING (learned, else :data:`LAST_STEP_RESERVE`);
  the learned waits take it in the order they are tried. A position whose share would be less
  than :data:`MIN_USEFUL_WAIT` gets :data:`SKIP` (0 s): it is skipped, not submitted with a
  wait too short for DWS to place anything (``plan_types.deadline_budget`` says so in the log).
  So waiting in cheap regions never leaves the last resort no time, and no job is created
  only to expire.
- Fewer than :data:`MIN_SAMPLES` samples (jobs that reached RUNNING): the user's max (the
  documented default: a wait nobody observed is not guessed shorter).

May import: vertex, orchestration; never airflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_gpu_sched.orchestration import observed

QUANTILE = 0.9  # of the observed waits: most nights' capacity comes within it
HEADROOM = 1.5  # the queue varies from night to night: a little more than the quantile
MIN_WAIT = timedelta(minutes=10)  # DWS needs some time to place even an easy job
MIN_SAMPLES = 3  # fewer: not learned, the user's max
LAST_STEP_RESERVE = timedelta(minutes=30)  # the plan's last step's time to RUNNING, never observed
MIN_SHARED_WAIT = timedelta(minutes=1)  # a shared wait is never 0 (0 asks FLEX_START to wait forever)
MIN_USEFUL_WAIT = MIN_WAIT  # a smaller share of the slack is no chance: the position is skipped
SKIP = 0.0  # share_slack's mark of a skipped position (never sent: 0 would ask FLEX_START to wait forever)


@dataclass(frozen=True)
class LearnedWait:
    region: str
    wait: timedelta
    samples: int
    stockouts: int
    quantile: float | None  # seconds; None: too few samples
    user_max: timedelta | None

    def __str__(self) -> str:
        if self.quantile is None:
            why = f"{self.samples} job(s) seen RUNNING, fewer than {MIN_SAMPLES}: the max"
        else:
            why = f"p{QUANTILE * 100:.0f} {self.quantile:.0f}s of {self.samples} job(s) seen RUNNING x {HEADROOM:g}"
        return (f"{self.region}: wait {self.wait} ({why}; {self.stockouts} never RUNNING, not counted; "
                f"max {self.user_max or 'none'})")


def samples(history: list[dict[str, Any]], region: str, accelerator: str, now: datetime) -> tuple[list[float], int]:
    """The region's recent waits to RUNNING in seconds, and how many of its recent jobs never ran."""
    oldest = now - observed.MAX_AGE
    mine = [e for e in history if e.get("region") == region and e.get("accelerator") == accelerator
            and (at := observed.entry_at(e)) is not None and at >= oldest]
    flex = [e for e in mine if e.get("strategy") == "FLEX_START"]
    recent = (flex or mine)[-observed.PER_REGION:]
    ran = [max(0.0, float(e["to_running"])) for e in recent if not e.get("stockout") and e.get("to_running") is not None]
    return ran, len(recent) - len(ran)


def learned_wait(history: list[dict[str, Any]], region: str, accelerator: str, now: datetime,
                 user_max: timedelta | None) -> LearnedWait:
    """The wait to ask for in ``region``, with its inputs (for the log)."""
    found, stockouts = samples(history, region, accelerator, now)
    if len(found) < MIN_SAMPLES:
        return LearnedWait(region, user_max if user_max is not None else observed_default(), len(found), stockouts,
                           None, user_max)
    ranked = sorted(found)
    q = ranked[min(len(ranked) - 1, max(0, math.ceil(QUANTILE * len(ranked)) - 1))]
    wait = max(MIN_WAIT, timedelta(seconds=round(q * HEADROOM)))
    if user_max is not None and user_max > timedelta(0):  # 0: "wait forever", no max
        wait = min(wait, user_max)
    return LearnedWait(region, wait, len(found), stockouts, q, user_max)


def share_slack(tried: list[tuple[float | None, bool]], slack: float) -> list[float | None]:
    """The positions tried before the plan's last step, in order, as (seconds it may take: a
    learned wait, or a bound; None: unbounded), learned?) -> the same with each learned wait cut
    so that all of them together fit in ``slack`` seconds (time left - run - the last step's
    time to RUNNING) after the bounds of the others; a learned position whose share would be
    less than :data:`MIN_USEFUL_WAIT` (or its own wait, when that is smaller) is :data:`SKIP`."""
    left = slack - sum(seconds or 0.0 for seconds, learned in tried if not learned)
    shared: list[float | None] = []
    for seconds, learned in tried:
        if not learned:
            shared.append(seconds)
            continue
        own = seconds or math.inf  # None or 0 ("wait forever"): unbounded, as much as is left
        take = min(own, left)
        if take < min(MIN_USEFUL_WAIT.total_seconds(), max(own, MIN_SHARED_WAIT.total_seconds())):
            shared.append(SKIP)  # too little of the slack left to be worth a job
            continue
        take = max(MIN_SHARED_WAIT.total_seconds(), take)
        left -= take
        shared.append(take)
    return shared


def reserve_of(history: list[dict[str, Any]], region: str, accelerator: str, strategy: str,
               now: datetime) -> timedelta:
    """The time the plan's last step (``strategy`` in ``region``) needs to be RUNNING: learned from
    that strategy's jobs there (as a wait), else :data:`LAST_STEP_RESERVE`."""
    oldest = now - observed.MAX_AGE
    ran = [float(e["to_running"]) for e in history if e.get("region") == region and e.get("accelerator") == accelerator
           and e.get("strategy") == strategy and e.get("to_running") is not None
           and (at := observed.entry_at(e)) is not None and at >= oldest]
    if len(ran) < MIN_SAMPLES:
        return LAST_STEP_RESERVE
    ranked = sorted(ran[-observed.PER_REGION:])
    return timedelta(seconds=ranked[min(len(ranked) - 1, math.ceil(QUANTILE * len(ranked)) - 1)] * HEADROOM)


def observed_default() -> timedelta:
    from airflow_gpu_sched.vertex.defaults import MAX_WAIT_DURATION

    return MAX_WAIT_DURATION


__all__ = ["HEADROOM", "LAST_STEP_RESERVE", "MIN_SAMPLES", "MIN_SHARED_WAIT", "MIN_USEFUL_WAIT", "MIN_WAIT", "QUANTILE",
           "SKIP", "LearnedWait", "learned_wait", "reserve_of", "samples", "share_slack"]
