"""``max_wait_duration="observed"``: a FLEX_START wait learned from the waits this installation
observed for that region and accelerator (pure; the history is :mod:`.observed`'s).

The rule (docs/cost.md, "Learned waits"):

- Samples: the region's last :data:`observed.PER_REGION` observations for the accelerator, none
  older than :data:`observed.MAX_AGE`, FLEX_START ones only when there are any (a STANDARD
  stockout says little about the DWS queue). A job that reached RUNNING is a sample of its wait;
  one that never did (its wait expired, a stockout) is a wait longer than any we know: it
  counts as infinite, so a region that often does not deliver gets the user's max.
- Wait: the :data:`QUANTILE` quantile of the samples (nearest rank) x :data:`HEADROOM`, at least
  :data:`MIN_WAIT`, at most the user's max (``"observed:<max>"``; default 1 day, the service's
  own default). The plan's deadline clips it again when the job is submitted (as any wait).
- Fewer than :data:`MIN_SAMPLES` samples: the user's max (the documented default: a wait
  nobody observed is not guessed shorter).

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


@dataclass(frozen=True)
class LearnedWait:
    region: str
    wait: timedelta
    samples: int
    stockouts: int
    quantile: float | None  # seconds (math.inf: more stockouts than the quantile allows); None: too few samples
    user_max: timedelta | None

    def __str__(self) -> str:
        if self.quantile is None:
            why = f"{self.samples} sample(s), fewer than {MIN_SAMPLES}: the max"
        elif math.isinf(self.quantile):
            why = f"p{QUANTILE * 100:.0f} of {self.samples} sample(s) never RUNNING ({self.stockouts} stockout(s)): the max"
        else:
            why = (f"p{QUANTILE * 100:.0f} {self.quantile:.0f}s of {self.samples} sample(s) "
                   f"({self.stockouts} stockout(s)) x {HEADROOM:g}")
        return f"{self.region}: wait {self.wait} ({why}; max {self.user_max or 'none'})"


def samples(history: list[dict[str, Any]], region: str, accelerator: str, now: datetime) -> list[float]:
    """The region's recent waits in seconds (math.inf: never RUNNING), oldest first."""
    oldest = now - observed.MAX_AGE
    mine = [e for e in history if e.get("region") == region and e.get("accelerator") == accelerator
            and (at := observed._at(e)) is not None and at >= oldest]
    flex = [e for e in mine if e.get("strategy") == "FLEX_START"]
    return [math.inf if e.get("stockout") or e.get("to_running") is None else max(0.0, float(e["to_running"]))
            for e in (flex or mine)[-observed.PER_REGION:]]


def learned_wait(history: list[dict[str, Any]], region: str, accelerator: str, now: datetime,
                 user_max: timedelta | None) -> LearnedWait:
    """The wait to ask for in ``region``, with its inputs (for the log)."""
    found = samples(history, region, accelerator, now)
    stockouts = sum(1 for s in found if math.isinf(s))
    if len(found) < MIN_SAMPLES:
        return LearnedWait(region, user_max if user_max is not None else observed_default(), len(found), stockouts,
                           None, user_max)
    ranked = sorted(found)
    q = ranked[min(len(ranked) - 1, max(0, math.ceil(QUANTILE * len(ranked)) - 1))]
    wait = user_max if math.isinf(q) else max(MIN_WAIT, timedelta(seconds=round(q * HEADROOM)))
    if wait is None:
        wait = observed_default()
    if user_max is not None and user_max > timedelta(0):  # 0: "wait forever", no max
        wait = min(wait, user_max)
    return LearnedWait(region, wait, len(found), stockouts, q, user_max)


def observed_default() -> timedelta:
    from airflow_gpu_sched.vertex.defaults import MAX_WAIT_DURATION

    return MAX_WAIT_DURATION


__all__ = ["HEADROOM", "MIN_SAMPLES", "MIN_WAIT", "QUANTILE", "LearnedWait", "learned_wait", "samples"]
