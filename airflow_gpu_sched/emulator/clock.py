"""Emulated time: runs ``speed`` times faster than real time and can be advanced by hand.

Every timestamp the emulator writes (createTime, startTime, ...) is emulated time, so a
scenario of hours of queueing plays in seconds, and a test can jump the clock instead of
sleeping.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone


class EmulatedClock:
    def __init__(self, speed: float = 1.0, start: datetime | None = None):
        if speed <= 0:
            raise ValueError(f"speed must be > 0 (got {speed})")
        self._origin = start or datetime.now(timezone.utc)
        self._mono_origin = time.monotonic()
        self._speed = float(speed)
        self._offset = 0.0  # emulated seconds added by advance()

    @property
    def speed(self) -> float:
        return self._speed

    def elapsed(self) -> float:
        """Emulated seconds since the clock started."""
        return (time.monotonic() - self._mono_origin) * self._speed + self._offset

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=self.elapsed())

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds

    def set_speed(self, speed: float) -> None:
        """Change speed from now on without moving the current emulated time."""
        if speed <= 0:
            raise ValueError(f"speed must be > 0 (got {speed})")
        self._offset = self.elapsed()
        self._mono_origin = time.monotonic()
        self._speed = float(speed)
