"""Emulated time: runs ``speed`` times faster than real time and can be advanced by hand.

Every timestamp the emulator writes (createTime, startTime, ...) is emulated time, so a
scenario of hours of queueing plays in seconds, and a test can jump the clock instead of
sleeping.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

MAX_ELAPSED = 1000 * 365 * 86400.0  # emulated seconds; datetime ends at year 9999
MAX_SPEED = 1e6


class EmulatedClock:
    def __init__(self, speed: float = 1.0, start: datetime | None = None):
        if not 0 < speed <= MAX_SPEED:  # NaN too
            raise ValueError(f"speed must be > 0 and <= {MAX_SPEED:g} (got {speed})")
        self._origin = start or datetime.now(timezone.utc)
        self._mono_origin = time.monotonic()
        self._speed = float(speed)
        self._offset = 0.0  # emulated seconds added by advance()

    @property
    def speed(self) -> float:
        return self._speed

    def elapsed(self) -> float:
        """Emulated seconds since the clock started (at most MAX_ELAPSED: now() never overflows)."""
        return min((time.monotonic() - self._mono_origin) * self._speed + self._offset, MAX_ELAPSED)

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=self.elapsed())

    def advance(self, seconds: float) -> None:
        if not 0 <= seconds <= MAX_ELAPSED:  # NaN too
            raise ValueError(f"the clock only moves forward, at most {MAX_ELAPSED:g} seconds (got {seconds})")
        if self.elapsed() + seconds >= MAX_ELAPSED:
            raise ValueError(f"the clock would pass {MAX_ELAPSED:g} emulated seconds from its start")
        self._offset += seconds

    def set_speed(self, speed: float) -> None:
        """Change speed from now on without moving the current emulated time."""
        if not 0 < speed <= MAX_SPEED:  # NaN too
            raise ValueError(f"speed must be > 0 and <= {MAX_SPEED:g} (got {speed})")
        self._offset = self.elapsed()
        self._mono_origin = time.monotonic()
        self._speed = float(speed)
