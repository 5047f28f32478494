"""The service's clock: the one "now" every duration a user writes is counted in.

``max_wait_duration`` and ``timeout`` are counted by the service itself (they are fields of the
job). So that ``capacity_wait_timeout``, ``deadline``, ``expected_run_time`` and the learned
waits count the same time, the operator and the triggers read :func:`now` here, never
``time.time()``. Its source is the HTTP ``Date`` header of every answer the clients receive
(RFC 9110 section 6.6.1; Google's front end sends it on every answer, errors included): each
answer anchors the clock at (its Date, the local monotonic time it arrived), and between answers
the clock runs on at the service's observed *rate* (service seconds per local second):

- on Vertex AI the rate is 1 and the Date is the wall clock (within Google's skew and the
  header's 1-second resolution): nothing changes;
- against the emulator at ``--speed K`` its Date is the emulated time and the rate K, so a
  ``capacity_wait_timeout="20m"`` ends after 20 emulated minutes (10 real seconds at 120x),
  just as ``max_wait_duration`` does.

The rate is measured over spans of at least :data:`RATE_SPAN` local seconds (the Date's 1 s
resolution is then a small error), snapped to 1 within :data:`SNAP` of it, and is the median of
the last three spans (until then their minimum): a hand-moved clock (the emulator's
``clock:advance``) is one odd span, outvoted. Before any rate is known it is 1.

What it never does:

- Poll intervals, the transient-error window, the triggers' settle and Airflow's own
  ``execution_timeout`` stay in local (real) seconds: they are about load on the API, outages
  and the scheduler, not about the service's schedule. A wait for a service-time instant is
  slept in real seconds as ``(instant - now()) / rate`` (:func:`real_seconds_until`), capped
  by the caller's poll interval, and checked again against :func:`now` on waking, so a rate
  learnt wrong costs an early look, never a late cancel.
- A ``Date`` that is absent, not a string, too long, not printable ASCII, not an IMF-fixdate
  or RFC 850 date naming GMT (the obsolete asctime form names no zone), or outside years
  2000-9999 is ignored; so is every Date once one stood still for :data:`RATE_SPAN` seconds or
  more (a rate below :data:`MIN_RATE`: a stuck front end, not a clock). With no answer heard yet, :func:`now` is the
  wall clock (``time.time()``); after one, the clock runs on from the last good answer. A Date
  is otherwise trusted as the rest of the answer is (the service decides the job's state too).
- One clock per process: every client's answers feed it. A process talking to two services
  whose clocks differ (the emulator at ``--speed`` and Vertex at once) sees the one it heard
  last: a Date going back anchors the clock there and its span is no rate.

Pure apart from reading the local clocks (injectable).

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable

RATE_SPAN = 4.0  # local seconds a rate is measured over: the Date's 1 s resolution is <= 25 % of it
SNAP = 0.3  # a rate within this of 1 is 1 (the wall clock, measured through a 1-second Date)
MAX_RATE = 1e6  # the emulator's fastest --speed
MIN_RATE = 0.01  # a Date that moves slower than this is no clock (stuck): the wall clock instead
MAX_DATE_LENGTH = 64  # "Sun, 06 Nov 1994 08:49:37 GMT" is 29
MIN_YEAR, MAX_YEAR = 2000, 9999
_RATES_KEPT = 3


def parse_date(value: Any) -> float | None:
    """The epoch seconds an HTTP ``Date`` header says, or None when it is not a date to trust."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_DATE_LENGTH or not value.isascii() \
            or not value.isprintable():
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None or when.utcoffset() != timezone.utc.utcoffset(None):  # HTTP dates are GMT
        return None
    if not MIN_YEAR <= when.year <= MAX_YEAR:
        return None
    return when.timestamp()


def _median_or_min(rates: list[float]) -> float:
    if not rates:
        return 1.0
    rate = sorted(rates)[1] if len(rates) == _RATES_KEPT else min(rates)
    return 1.0 if abs(rate - 1.0) <= SNAP else rate


class ServiceClock:
    """The service's time as last heard (see the module's docstring); thread-safe."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self._monotonic, self._wall = monotonic, wall
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._anchor: tuple[float, float] | None = None  # (service seconds, local monotonic)
            self._span: tuple[float, float] | None = None  # where the rate span being measured began
            self._rates: list[float] = []
            self._stuck = False  # a Date that stopped moving: ignored from then on (until reset)

    def heard(self, date_header: Any) -> bool:
        """One answer's ``Date`` header, as it arrived now. False: ignored (absent, garbled)."""
        when = parse_date(date_header)
        if when is None or self._stuck:
            return False
        self.note(when, self._monotonic())
        return True

    def note(self, when: float, at: float) -> None:
        with self._lock:
            self._anchor = (when, at)
            if self._span is None:
                self._span = (when, at)
                return
            elapsed = at - self._span[1]
            if elapsed < RATE_SPAN:
                if when < self._span[0]:  # the service's time went back: measure anew from here
                    self._span = (when, at)
                return
            rate = (when - self._span[0]) / elapsed
            self._span = (when, at)
            if 0 <= rate < MIN_RATE:  # the same Date for RATE_SPAN seconds and more: not a clock
                self._anchor, self._span, self._rates, self._stuck = None, None, [], True
            elif MIN_RATE <= rate <= MAX_RATE:
                self._rates = [*self._rates, rate][-_RATES_KEPT:]

    @property
    def heard_any(self) -> bool:
        return self._anchor is not None

    @property
    def rate(self) -> float:
        """Service seconds per local second (1 until measured)."""
        with self._lock:
            return _median_or_min(self._rates)

    def now(self) -> float:
        """The service's time now, epoch seconds (the wall clock until an answer was heard)."""
        with self._lock:
            anchor, rate = self._anchor, _median_or_min(self._rates)
        if anchor is None:
            return self._wall()
        return anchor[0] + max(0.0, self._monotonic() - anchor[1]) * rate

    def real_seconds_until(self, when: float, cap: float | None = None) -> float:
        """Local seconds to sleep until the service's time reaches ``when`` (>= 0, <= ``cap``)."""
        wait = max(0.0, (when - self.now()) / self.rate)
        return wait if cap is None else min(wait, max(0.0, cap))

    def service_seconds(self, real_seconds: float) -> float:
        """How much service time passes in ``real_seconds`` local seconds."""
        return real_seconds * self.rate

    def offset(self) -> float:
        """Service time minus wall time, now (0 until an answer was heard)."""
        return self.now() - self._wall() if self.heard_any else 0.0


CLOCK = ServiceClock()


def heard(date_header: Any) -> bool:
    return CLOCK.heard(date_header)


def now() -> float:
    return CLOCK.now()


def now_datetime() -> datetime:
    return datetime.fromtimestamp(CLOCK.now(), timezone.utc)


def real_seconds_until(when: float, cap: float | None = None) -> float:
    return CLOCK.real_seconds_until(when, cap)


def service_seconds(real_seconds: float) -> float:
    return CLOCK.service_seconds(real_seconds)


def from_wall(when: datetime) -> datetime:
    """A wall-clock instant (Airflow's data interval, a user's datetime deadline) as the same
    distance from now in service time: on Vertex, itself."""
    from datetime import timedelta

    return when + timedelta(seconds=CLOCK.offset())


def reset() -> None:
    """Forget what was heard (a test's fresh emulator; a process now talking to another service)."""
    CLOCK.reset()
