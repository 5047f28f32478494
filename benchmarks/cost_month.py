"""A month of nights: the same nightly 8-GPU task under four policies, 30 seeded nights of shifting
capacity, preemptions and prices; per policy the total cost, GPU-hours, deadline misses, mean time
to RUNNING, jobs created and cancelled, and the ratios against the fixed plan.

What runs and what is modelled (why: 4 policies x 30 nights through the operator on the emulator
take far more than the 5 minutes this must run in on a shared 2-core machine; one night through
the emulator is ``benchmarks/plan_race.py``):

- The decisions are the product's own, imported, not re-implemented: the region orders
  (``observed.order`` for ``region_order="observed"``, ``cheapest.cheapest_order`` +
  ``cheapest.history_stats`` for ``plan_objective="cost"``), the learned waits
  (``learned_wait.learned_wait`` and ``share_slack`` for ``max_wait_duration="observed"``), the deadline's clipping of a
  wait (``plan_types.deadline_budget``'s rule: a step is skipped when the time left is less than the
  run, a FLEX_START wait is at most time left - run), the history (``observed.observation`` /
  ``observed.add``, one month, bounded as in the product) and the price lookup (``price_of``).
- By default the service is modelled in emulated minutes (:class:`ModelService`, no HTTP): per night
  and region, the minute a FLEX_START or SPOT job would get its GPUs (a stockout: never that night),
  how often a SPOT run is preempted (each costs half a run, ``budget.PREEMPTION_WASTE``, plus a
  10-minute requeue), and the price per GPU-hour per (strategy, region), all drawn from ``--seed``
  and drifting over the month (us-central1's DWS queue grows, us-east4 stays steady and dearer,
  us-west1 is cheap with stockouts; SPOT preemptions rise in us-west1). STANDARD in us-central1 always
  has capacity after 15 minutes.
  Prices are illustrative, not Google's.

The plan: FLEX_START in [us-central1, us-east4, us-west1] (``max_wait_duration=2h``), SPOT in
[us-west1, us-central1] (30-minute bound), STANDARD in us-central1; run 4 h, deadline 8 h after the
night starts.

(a) fixed: the plan as given; (b) ``region_order="observed"`` on each step; (c)
``plan_objective="cost"`` with ``max_wait_duration="observed:2h"``; (d) a race of FLEX_START
us-central1, FLEX_START us-east4 and SPOT us-west1, then STANDARD. Every policy sees the same
nights (capacity, preemptions, prices), the same run time and deadline; (a)-(c) the same plan steps.

The headline is ``cost_per_night_in_time``: the total cost (a missed night's spend included) over
the nights that finished before their deadline. A missed night is a failed night, not a saving:
the plain total flatters a policy that gives up (the fixed plan's misses cost nothing because they
never ran).

(e) the hindsight oracle (:func:`oracle`, model mode only): it knows each night's draws in advance
and takes the cheapest run that finishes in time (else the cheapest that finishes: a miss) among
every strategy, region and wait the policies can take. It is the lower bound: each policy's
``cost_per_night_in_time_to_oracle``, ``misses_over_oracle``, ``same_nights_cost_to_oracle`` (its
spend on the nights it finished in time over the oracle's on those nights) and
``nights_beating_oracle`` (0 unless the oracle is wrong: checked night by night).

``--service emulator``: the same month with the emulator as the service (:class:`EmulatorService`:
real creates through the product's client, in emulated time the benchmark advances); it differs
from the model only where the emulator's preempted job resumes from its progress (docs/cost.md).
It has no oracle column: the oracle reads the model's draws and charges the model's preemptions.

    python benchmarks/cost_month.py [--seed N] [--nights 30] [--service model|emulator] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_gpu_sched.orchestration import observed  # noqa: E402
from airflow_gpu_sched.orchestration.budget import PREEMPTION_WASTE  # noqa: E402
from airflow_gpu_sched.orchestration.catalog_prices import price_of  # noqa: E402
from airflow_gpu_sched.orchestration.cheapest import cheapest_order, history_stats, spot_preemptions  # noqa: E402
from airflow_gpu_sched.orchestration.learned_wait import learned_wait, reserve_of, share_slack  # noqa: E402
from airflow_gpu_sched.orchestration.plan_types import MIN_FLEX_START_WAIT  # noqa: E402
from airflow_gpu_sched.vertex.enums import JobState  # noqa: E402

GPU, GPUS = "NVIDIA_H100_80GB", 8
C1, E4, W1 = "us-central1", "us-east4", "us-west1"
RUN_MIN, DEADLINE_MIN = 240.0, 480.0
FLEX_WAIT_MIN, SPOT_BOUND_MIN, STANDARD_PROVISION_MIN, REQUEUE_MIN = 120.0, 30.0, 15.0, 10.0
PLAN = [("FLEX_START", (C1, E4, W1)), ("SPOT", (W1, C1)), ("STANDARD", (C1,))]
START = datetime(2026, 11, 1, 1, 0, tzinfo=timezone.utc)
POLICIES = ("fixed", "observed", "cost", "race")


@dataclass
class Night:
    arrival: dict[tuple[str, str], float]  # (strategy, region) -> minute GPUs are free (inf: stockout)
    preemptions: dict[str, int]  # SPOT region -> preemptions of a run there
    prices: dict


def night(rng: random.Random, n: int, nights: int) -> Night:
    """Night ``n``'s capacity and prices, drifting over the month."""
    drift = n / max(1, nights - 1)  # 0 -> 1
    flex = {C1: (20 + 200 * drift, 0.05 + 0.25 * drift), E4: (60, 0.1), W1: (40, 0.35)}  # (median min, P(stockout))
    arrival = {}
    for region, (median, stockout) in flex.items():
        arrival[("FLEX_START", region)] = math.inf if rng.random() < stockout else median * rng.lognormvariate(0, 0.5)
    for region, stockout in ((W1, 0.15), (C1, 0.4)):
        arrival[("SPOT", region)] = math.inf if rng.random() < stockout else rng.uniform(2, 40)
    rate = {W1: 0.2 + 1.2 * drift, C1: 0.3}
    preemptions = {r: min(3, _poisson(rng, lam)) for r, lam in rate.items()}
    wobble = lambda: 1 + rng.uniform(-0.1, 0.1)  # noqa: E731
    prices = {"currency": "USD", GPU: {"STANDARD": 9.0},
              "by_region": {C1: {GPU: {"FLEX_START": 4.0 * wobble(), "SPOT": 2.6 * wobble(), "STANDARD": 9.0}},
                            E4: {GPU: {"FLEX_START": 4.6 * wobble()}},
                            W1: {GPU: {"FLEX_START": 3.2 * wobble(), "SPOT": 2.2 * wobble()}}}}
    return Night(arrival, preemptions, prices)


def _poisson(rng: random.Random, lam: float) -> int:
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


@dataclass
class Outcome:
    cost: float = 0.0
    gpu_hours: float = 0.0
    missed: bool = False
    to_running: float | None = None
    created: int = 0
    cancelled: int = 0
    attempts: list = field(default_factory=list)  # (strategy, region, ran, minutes waited, preemptions)


@dataclass(frozen=True)
class Trained:
    """A run that got its GPUs: its GPU time per GPU (preemption waste included), the minute it
    ended, its preemptions."""
    hours: float
    end: float
    preemptions: int


class ModelService:
    """The service as arithmetic on the night's draws (the default; the whole month in 0.2 s):
    GPUs come ``arrival`` minutes after a submit; each SPOT preemption costs half a run
    (``budget.PREEMPTION_WASTE``, the product's planning figure) plus a 10-minute requeue."""

    name = "model"

    def begin(self, sky: Night) -> None:
        self.sky = sky

    def submit(self, strategy: str, region: str, now: float, wait: float) -> float | None:
        """Minutes after ``now`` the job submitted then got its GPUs (<= ``wait``), else None."""
        got = STANDARD_PROVISION_MIN if strategy == "STANDARD" else self.sky.arrival[(strategy, region)]
        return got if got <= wait else None

    def run(self, strategy: str, region: str, at: float) -> Trained:
        p = self.sky.preemptions.get(region, 0) if strategy == "SPOT" else 0
        hours = RUN_MIN / 60 * (1 + PREEMPTION_WASTE * p)
        return Trained(hours, at + hours * 60 + p * REQUEUE_MIN, p)

    def race(self, members: list[tuple[str, str, float]]) -> tuple[tuple[float, str, str] | None, list, int]:
        """All members submitted at minute 0, each with its bound: the winner (minute, strategy,
        region) or None, the losers' wasted runs [(strategy, region, hours)], the cancels."""
        got = [(self.sky.arrival[(s, r)], s, r) for s, r, w in members if self.sky.arrival[(s, r)] <= w]
        if got:
            return min(got), [], len(members) - 1
        return None, [], sum(s == "SPOT" for s, _, _ in members)  # the SPOT bound; DWS waits expire

    def counts(self) -> tuple[int, int] | None:
        return None  # the policy's own counts


TIERS = {"FLEX_START": "flex_start", "SPOT": "spot", "STANDARD": "standard"}
PROJECT = "bench-project"
POLL_MIN = 1.0  # the race's poll, emulated minutes
# Emulated time stands still unless the benchmark advances it (speed 1e-6: a real second is a
# microsecond); GPUs only as the night's story sets them; a job runs RUN_MIN unless preempted.
EMULATED = {"speed": 1e-6, "queueSeconds": 0, "provisioningSeconds": 0, "cancelSeconds": 0,
            "runSeconds": RUN_MIN * 60, "defaultCapacity": {"standard": 0, "spot": 0, "flexStart": 0}}


class EmulatorService:
    """The service is the emulator (``--service emulator``): each submit is a real create through
    the product's client (strict on both sides), the night's GPUs are capacity settings that come
    ``arrival`` minutes after the submit (``atSeconds``), FLEX_START waits expire in the emulator
    (``maxWaitDuration``), the operator's bounds are cancels, and each SPOT preemption is the
    emulator's own (``:preempt``, its GPUs back 10 minutes later). Times, GPU time, jobs created
    and cancelled are read from the emulator's records. One difference from the model, on
    purpose: a preempted job resumes from its progress (checkpoints), so a preemption costs its
    requeue, not half a run."""

    name = "emulator"

    def __init__(self, url: str):
        from airflow_gpu_sched.emulator.control import EmulatorControl
        from airflow_gpu_sched.vertex.client import VertexClient

        self.control = EmulatorControl(url)
        self.clients = {r: VertexClient(location=r, project=PROJECT, api_endpoint=url) for r in (C1, E4, W1)}

    def begin(self, sky: Night) -> None:
        self.sky, self.minute, self.job = sky, 0.0, None
        self.control.reset(EMULATED)  # no jobs, a fresh clock
        self.origin = datetime.fromisoformat(self.control.advance(0))

    def _to(self, minute: float) -> None:
        if minute > self.minute:
            self.control.advance((minute - self.minute) * 60)
            self.minute = minute

    def _create(self, strategy: str, region: str, now: float, wait: float) -> str:
        self._to(now)
        arrival = STANDARD_PROVISION_MIN if strategy == "STANDARD" else self.sky.arrival[(strategy, region)]
        if math.isfinite(arrival):
            self.control.set_capacity(region, GPU, **{TIERS[strategy]: GPUS}, at_seconds=arrival * 60)
        scheduling: dict = {"strategy": strategy}
        if strategy == "FLEX_START":
            scheduling["maxWaitDuration"] = f"{round(wait * 60)}s"
        pool = {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": GPU, "acceleratorCount": GPUS},
                "replicaCount": "1", "containerSpec": {"imageUri": "gcr.io/bench/trainer:1"}}
        job = {"displayName": "nightly", "jobSpec": {"workerPoolSpecs": [pool], "scheduling": scheduling}}
        return self.clients[region].create_custom_job(job).name

    def _history(self, name: str) -> dict:
        return self.control.history(name)

    def _minute(self, when: str) -> float:
        return (datetime.fromisoformat(when) - self.origin).total_seconds() / 60

    def _running_at(self, name: str) -> float | None:
        """The minute the job first ran (its history; startTime is set at admission, not here)."""
        return next((self._minute(h["time"]) for h in self._history(name)["history"]
                     if h["state"] == "JOB_STATE_RUNNING"), None)

    def _cancel(self, name: str) -> None:
        self.clients[name.split("/")[3]].cancel_custom_job(name)

    def submit(self, strategy: str, region: str, now: float, wait: float) -> float | None:
        name = self._create(strategy, region, now, wait)
        if math.isinf(wait):
            wait = STANDARD_PROVISION_MIN if strategy == "STANDARD" else DEADLINE_MIN
        self._to(now + wait)
        at = self._running_at(name)
        if at is not None:
            self.job = name
            return at - now
        if strategy != "FLEX_START":  # the operator's bound; a FLEX_START wait expired in the emulator
            self._cancel(name)
        return None

    def run(self, strategy: str, region: str, at: float) -> Trained:
        name = self.job
        preemptions = self.sky.preemptions.get(region, 0) if strategy == "SPOT" else 0
        for k in range(preemptions):  # evenly through the run, each after the job ran again
            running = [h for h in self._history(name)["history"] if h["state"] == "JOB_STATE_RUNNING"]
            self._to(self._minute(running[-1]["time"]) + RUN_MIN / (preemptions + 1))
            self.control.preempt(name)
            self.control.set_capacity(region, GPU, spot=0)  # reclaimed: back REQUEUE_MIN later
            self.control.set_capacity(region, GPU, spot=GPUS, at_seconds=REQUEUE_MIN * 60)
            self._to(self.minute + REQUEUE_MIN)
        self._to(self.minute + RUN_MIN + 1)
        record = self._history(name)
        states = record["history"]
        assert states[-1]["state"] == "JOB_STATE_SUCCEEDED", states
        return Trained(_running_minutes(states, self._minute) / 60, self._minute(states[-1]["time"]),
                       record["restarts"])

    def race(self, members: list[tuple[str, str, float]]) -> tuple[tuple[float, str, str] | None, list, int]:
        names = [(self._create(s, r, 0.0, w), s, r, w) for s, r, w in members]
        horizon, minute = max(w for *_, w in names), 0.0
        while minute < horizon:
            minute = min(minute + POLL_MIN, horizon)
            self._to(minute)
            running = sorted((at, n, s, r) for n, s, r, _ in names if (at := self._running_at(n)) is not None)
            if running:  # the first to run wins; every other member is cancelled
                at, self.job, strategy, region = running[0]
                for name, *_ in names:
                    if name != self.job and not JobState(self._state(name)).is_terminal():
                        self._cancel(name)
                wasted = [(s, r, _running_minutes(self._history(n)["history"], self._minute) / 60)
                          for _, n, s, r in running[1:]]
                return (at, strategy, region), wasted, 0
            for name, strategy, _, bound in names:
                if strategy == "SPOT" and minute >= bound and self._state(name) == "JOB_STATE_QUEUED":
                    self._cancel(name)  # the operator's bound
        return None, [], 0

    def _state(self, name: str) -> str:
        return self._history(name)["history"][-1]["state"]

    def counts(self) -> tuple[int, int]:
        jobs = [j for client in self.clients.values() for j in client.list_custom_jobs()]
        return len(jobs), sum(j.state.value == "JOB_STATE_CANCELLED" for j in jobs)


def _running_minutes(history: list[dict], minute) -> float:
    """Minutes the job spent RUNNING, from its state history."""
    total, since = 0.0, None
    for change in history:
        at = minute(change["time"])
        if since is not None:
            total, since = total + at - since, None
        if change["state"] == "JOB_STATE_RUNNING":
            since = at
    return total


def train(out: Outcome, sky: Night, service, strategy: str, region: str, at: float, first: float,
          submitted: float) -> None:
    """The job submitted at minute ``submitted`` got its GPUs at ``at``: run it to the end."""
    run = service.run(strategy, region, at)
    spend(out, sky, strategy, region, run.hours)
    out.to_running = at - first
    out.missed = run.end > DEADLINE_MIN
    out.attempts.append((strategy, region, True, at - submitted, run.preemptions))


def spend(out: Outcome, sky: Night, strategy: str, region: str, hours: float) -> None:
    price = price_of(sky.prices, GPU, strategy, region) or 0.0
    out.cost += price * GPUS * hours
    out.gpu_hours += GPUS * hours


def sequential(sky: Night, service, orders: list[tuple[str, tuple[str, ...]]], waits: dict[str, float],
               preemptions: dict[str, float] | None = None) -> Outcome:
    """The plan's positions in order (regions first), the deadline's rule at each start (a SPOT
    step's run with its observed preemptions, under the cost objective)."""
    out, now, first = Outcome(), 0.0, None
    for strategy, regions in orders:
        for region in regions:
            left = DEADLINE_MIN - now
            needed = RUN_MIN * (1 + PREEMPTION_WASTE * (preemptions or {}).get(region, 0.0)) if strategy == "SPOT" \
                else RUN_MIN
            if left <= needed:  # deadline_budget: the step cannot finish, skipped
                continue
            if strategy == "FLEX_START":
                wait = min(waits.get(region, FLEX_WAIT_MIN), left - RUN_MIN)
                if wait < MIN_FLEX_START_WAIT.total_seconds() / 60:  # also learned_wait.SKIP (0): skipped
                    continue
            else:  # running_bound: the smaller of the step's bound and deadline - run
                wait = min(SPOT_BOUND_MIN if strategy == "SPOT" else math.inf, left - needed)
            out.created += 1
            first = now if first is None else first
            got = service.submit(strategy, region, now, wait)
            if got is not None:
                train(out, sky, service, strategy, region, now + got, first, now)
                return out
            out.attempts.append((strategy, region, False, wait, 0))
            out.cancelled += strategy == "SPOT"  # the operator's bound cancels it; a DWS wait expires by itself
            now += wait
    out.missed = True  # never ran
    return out


def race(sky: Night, service) -> Outcome:
    out = Outcome(created=3)
    members = [("FLEX_START", C1, FLEX_WAIT_MIN), ("FLEX_START", E4, FLEX_WAIT_MIN), ("SPOT", W1, SPOT_BOUND_MIN)]
    bounded = [(s, r, min(w, DEADLINE_MIN - RUN_MIN)) for s, r, w in members]
    winner, wasted, out.cancelled = service.race(bounded)
    for strategy, region, hours in wasted:  # a loser that ran before its cancel
        spend(out, sky, strategy, region, hours)
    if winner is not None:
        at, strategy, region = winner
        train(out, sky, service, strategy, region, at, 0.0, 0.0)
        return out
    now = max(w for _, _, w in bounded)
    out.created += 1
    got = service.submit("STANDARD", C1, now, math.inf)
    train(out, sky, service, "STANDARD", C1, now + got, 0.0, now)
    return out


# Every (strategy, region) a policy can submit (the plan's positions; the race's members are among them),
# each with the longest wait any policy gives it: the plan's bound, clipped by the deadline's rule.
ORACLE_CHOICES = [(s, r, min(FLEX_WAIT_MIN if s == "FLEX_START" else SPOT_BOUND_MIN if s == "SPOT" else math.inf,
                             DEADLINE_MIN - RUN_MIN))
                  for s, regions in PLAN for r in regions]


def oracle(sky: Night) -> Outcome:
    """The hindsight oracle: it knows the night (every arrival, preemption and price) and takes the
    cheapest way to finish before the deadline, else the cheapest way to finish at all (a miss).
    The lower bound of every other column.

    Why one submit at minute 0 per choice covers every order, wait and race the policies can take:
    in the model a job gets its GPUs ``arrival`` minutes after its submit whenever it is submitted,
    a try that never got GPUs costs nothing (a FLEX_START wait expires, a queued SPOT job is
    cancelled unbilled) and a race's losers never run, so any policy's night is one run of one
    (strategy, region) within its bound, and submitting it first ends no later at the same cost."""
    model, best = ModelService(), None
    model.begin(sky)
    for strategy, region, bound in ORACLE_CHOICES:
        got = model.submit(strategy, region, 0.0, bound)
        if got is None:
            continue
        trial = Outcome(created=1)
        train(trial, sky, model, strategy, region, got, 0.0, 0.0)
        # in time first, then the cheapest; ties: the plan's order (deterministic)
        if best is None or (trial.missed, trial.cost) < (best.missed, best.cost):
            best = trial
    if best is None:  # nothing can run tonight: not in this model (STANDARD always comes), kept total
        best = Outcome(missed=True)
    return best


def month(seed: int, nights: int, service=None) -> dict:
    service = service or ModelService()
    rng = random.Random(seed)
    skies = [night(rng, n, nights) for n in range(nights)]
    outcomes = {policy: policy_month(policy, skies, service) for policy in POLICIES}
    if service.name == "model":  # the oracle reads the model's draws; the emulator's runs differ (resumes)
        outcomes["oracle"] = [oracle(sky) for sky in skies]
    results = {policy: summary(outs) for policy, outs in outcomes.items()}
    base = results["fixed"]
    for policy, r in results.items():
        r["cost_ratio"] = round(r["cost"] / base["cost"], 3)
        r["gpu_hours_ratio"] = round(r["gpu_hours"] / base["gpu_hours"], 3)
        r["cost_per_night_in_time_ratio"] = round(r["cost_per_night_in_time"] / base["cost_per_night_in_time"], 3)
        r["to_running_ratio"] = round((r["mean_to_running_min"] or 0) / max(base["mean_to_running_min"] or 0, 1e-9), 3)
        if "oracle" in outcomes:
            r.update(to_oracle(outcomes[policy], outcomes["oracle"], r, results["oracle"]))
    return results


def policy_month(policy: str, skies: list[Night], service) -> list[Outcome]:
    """The policy's nights in order, each decided on the history of the nights before it."""
    history: list[dict] = []
    outs = []
    for n, sky in enumerate(skies):
        when = START + timedelta(days=n)
        orders, waits, preemptions = list(PLAN), {}, None
        if policy == "observed":
            orders = [(s, observed.order(regions, GPU, history, when)[0]) for s, regions in PLAN]
        elif policy == "cost":
            fallback = price_of(sky.prices, GPU, PLAN[-1][0], PLAN[-1][1][0])  # the last resort's, as the operator
            orders = [(s, cheapest_order(regions, {r: price_of(sky.prices, GPU, s, r) for r in regions},
                                         history_stats(regions, GPU, history, when, s), RUN_MIN * 60,
                                         DEADLINE_MIN * 60, None if s == PLAN[-1][0] else fallback)[0])
                      for s, regions in PLAN]
            learned = {r: learned_wait(history, r, GPU, when, timedelta(minutes=FLEX_WAIT_MIN)).wait.total_seconds()
                       for r in PLAN[0][1]}
            # the plan's slack shared as the operator does (region_order._waits): the positions before the last step
            tried = [(learned[r], True) for r in orders[0][1]] + [(SPOT_BOUND_MIN * 60, False)] * len(PLAN[1][1])
            slack = (DEADLINE_MIN - RUN_MIN) * 60 - reserve_of(history, C1, GPU, "STANDARD", when).total_seconds()
            shared = share_slack(tried, slack)
            waits = {r: w / 60 for r, w in zip(orders[0][1], shared)}
            preemptions = spot_preemptions(PLAN[1][1], GPU, history, when)
        service.begin(sky)
        out = race(sky, service) if policy == "race" else sequential(sky, service, orders, waits, preemptions)
        counted = service.counts()
        if counted is not None:  # the emulator's own records
            out.created, out.cancelled = counted
        outs.append(out)
        for strategy, region, ran, minutes, p in out.attempts:  # what the operator records, per attempt
            entry = observed.observation({"location": region, "accelerator_type": GPU, "strategy": strategy,
                                          "running_since": "x" if ran else None, "queued_seconds": minutes * 60,
                                          "outcome": None if ran else "capacity_timeout"}, p, when)
            if entry is not None:
                history = observed.add(history, entry, when + timedelta(hours=8))
    return outs


def summary(outs: list[Outcome]) -> dict:
    ran = [o.to_running for o in outs if o.to_running is not None]
    return {"cost": round(sum(o.cost for o in outs), 1), "gpu_hours": round(sum(o.gpu_hours for o in outs), 1),
            "deadline_misses": sum(o.missed for o in outs),
            # every dollar spent (a missed night's too: a failed night is no saving) per night
            # that finished before its deadline: the headline, what a finished night costs
            "cost_per_night_in_time": round(sum(o.cost for o in outs) / max(1, sum(not o.missed for o in outs)), 1),
            "mean_to_running_min": round(sum(ran) / len(ran), 1) if ran else None,
            "jobs_created": sum(o.created for o in outs), "jobs_cancelled": sum(o.cancelled for o in outs)}


def to_oracle(outs: list[Outcome], best: list[Outcome], r: dict, oracle_r: dict) -> dict:
    """A policy against the oracle: its headline's ratio, the deadlines it misses that the oracle
    makes, what it spends on the nights it finished in time over what the oracle spends on the
    same nights (>= 1 if the oracle is right: it finishes each of them at least as cheaply), and
    the nights it beat the oracle (finished in time where the oracle missed, or cheaper; 0 if the
    oracle is right: the check of the lower bound, night by night)."""
    kept = [(o.cost, b.cost) for o, b in zip(outs, best) if not o.missed]
    beaten = sum(not o.missed and (b.missed or o.cost < b.cost - 1e-9) for o, b in zip(outs, best))
    return {"cost_per_night_in_time_to_oracle": round(r["cost_per_night_in_time"] / oracle_r["cost_per_night_in_time"], 3),
            "misses_over_oracle": r["deadline_misses"] - oracle_r["deadline_misses"],
            "same_nights_cost_to_oracle": round(sum(c for c, _ in kept) / max(sum(b for _, b in kept), 1e-9), 3),
            "nights_beating_oracle": beaten}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--service", choices=("model", "emulator"), default="model",
                        help="the service: the seeded model (default) or the emulator over HTTP, in emulated time")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = parser.parse_args()
    started = time.monotonic()
    if args.service == "emulator":
        from airflow_gpu_sched.emulator import EmulatorServer

        with EmulatorServer() as server:
            results = month(args.seed, args.nights, EmulatorService(server.url))
    else:
        results = month(args.seed, args.nights)
    keys = ("cost_per_night_in_time", "cost_per_night_in_time_ratio", "cost_per_night_in_time_to_oracle",
            "same_nights_cost_to_oracle", "nights_beating_oracle", "deadline_misses", "misses_over_oracle", "cost", "cost_ratio",
            "gpu_hours", "gpu_hours_ratio", "mean_to_running_min",
            "to_running_ratio", "jobs_created", "jobs_cancelled")
    shown = list(results)  # the policies, then the oracle (model only)
    print(f"{args.nights} nights, seed {args.seed}, service: {args.service} ({time.monotonic() - started:.1f}s)"
          + ("" if "oracle" in results else "; oracle: model only"))
    print(f"{'':34}" + "".join(f"{p:>10}" for p in shown))
    for key in keys:
        if key in results["fixed"]:
            print(f"{key:34}" + "".join(f"{str(results[p][key]):>10}" for p in shown))
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
