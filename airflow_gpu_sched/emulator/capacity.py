"""GPU capacity per (location, accelerator type), separately for each capacity strategy.

STANDARD, SPOT and FLEX_START draw on separate pools, as they do at Google (on-demand quota
and capacity, Spot's spare capacity, DWS's calendar of whole nodes). A job holds its GPUs from
PENDING until it ends; FLEX_START takes all of them at once or none (gang scheduling).

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from airflow_gpu_sched.emulator.scenario import TierCapacity
from airflow_gpu_sched.vertex.enums import Strategy

TIERS = ("standard", "spot", "flex_start")


def tier_of(strategy: Strategy) -> str:
    return {Strategy.SPOT: "spot", Strategy.FLEX_START: "flex_start"}.get(strategy.effective, "standard")


class CapacityLedger:
    def __init__(self, default: TierCapacity):
        self._default = default
        self._total: dict[tuple[str, str, str], int] = {}  # (location, accelerator, tier) -> GPUs
        self._used: dict[tuple[str, str, str], int] = {}

    def set(self, location: str, accelerator: str, **per_tier: int | None) -> None:
        for tier, gpus in per_tier.items():
            if gpus is not None:
                if gpus < 0:
                    raise ValueError(f"{tier}: capacity cannot be negative (got {gpus})")
                self._total[(location, accelerator, tier)] = gpus

    def total(self, location: str, accelerator: str, tier: str) -> int:
        key = (location, accelerator, tier)
        if key in self._total:
            return self._total[key]
        return getattr(self._default, tier) or 0

    def free(self, location: str, accelerator: str, tier: str) -> int:
        return self.total(location, accelerator, tier) - self._used.get((location, accelerator, tier), 0)

    def try_take(self, location: str, tier: str, demand: dict[str, int]) -> bool:
        """Take every GPU in ``demand`` at once, or nothing."""
        if any(self.free(location, acc, tier) < n for acc, n in demand.items()):
            return False
        for acc, n in demand.items():
            key = (location, acc, tier)
            self._used[key] = self._used.get(key, 0) + n
        return True

    def give_back(self, location: str, tier: str, demand: dict[str, int]) -> None:
        for acc, n in demand.items():
            key = (location, acc, tier)
            self._used[key] = max(0, self._used.get(key, 0) - n)

    def snapshot(self) -> list[dict]:
        keys = sorted({k[:2] for k in self._total} | {k[:2] for k in self._used})
        return [
            {"location": loc, "acceleratorType": acc,
             **{_camel(t): {"total": self.total(loc, acc, t), "used": self._used.get((loc, acc, t), 0)}
                for t in TIERS}}
            for loc, acc in keys
        ]


def _camel(tier: str) -> str:
    return "flexStart" if tier == "flex_start" else tier
