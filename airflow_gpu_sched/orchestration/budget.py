"""Budgets: may a plan step run, given its price per GPU-hour and what is left to spend?

Pure decisions (:func:`estimate`, :func:`refusal`, :func:`rows`) over a :class:`Budget` (plain
data the operator builds once per decision round, :func:`budget_for`); the plan engine asks
:func:`refusal` before a step asks for GPUs and skips the step when it answers (the plan moves
on, as for the deadline; with no step left the task fails with ``BudgetExceeded``).

The rule (docs/cost.md, "Budgets"):

- ``max_price_per_gpu_hour`` on a step: the step runs only where its price per GPU-hour (the
  price table, per region when it comes from the catalog) is at most that. An unknown price
  does not pass a cap (a cap must not be passed by a price nobody knows).
- ``budget=`` on the task: expected cost = sum over the job's accelerators of price x GPUs held
  x ``expected_run_time`` (hours). A FLEX_START wait costs nothing (no GPU is held while it
  waits); a SPOT step adds the preemptions it may take: half a run each (what is lost between
  checkpoints on average, assumed), ``expected_preemptions`` of them (0 until observed rates are
  given; with ``plan_objective="cost"`` or ``region_order="cheapest"`` the step carries the rate
  observed in each region, ``SpotStep.observed_preemptions``). A race costs its dearest member
  (only the winner runs; losers are cancelled before they run). What is left = budget - what
  this task's earlier attempts cost (the ledger's, so a retry does not spend twice). A step whose expected cost exceeds what is left is skipped.

May import: orchestration, vertex; airflow only inside functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from airflow_gpu_sched.orchestration.catalog_prices import price_of
from airflow_gpu_sched.orchestration.plans import RaceStep, SpotStep, Step

PREEMPTION_WASTE = 0.5  # of a run, lost per preemption on average between checkpoints (assumed)


@dataclass(frozen=True)
class Budget:
    remaining: float | None  # None: no task budget (caps only)
    prices: Mapping[str, Any] | None
    demand: tuple[tuple[str, int], ...]  # (accelerator type, GPUs held at once)
    expected_run_time: timedelta | None = None
    expected_preemptions: float = 0.0  # per SPOT run (observed rates, when known)
    spent: float = 0.0
    note: str = ""  # e.g. the run budget's share, said in each refusal
    # a step on a hardware alternative holds its own GPUs (orchestration/hardware.py): (Hardware, demand)
    hardware_demand: tuple[tuple[Any, tuple[tuple[str, int], ...]], ...] = ()

    def demand_of(self, step: Step) -> tuple[tuple[str, int], ...]:
        """The GPUs ``step``'s job holds at once: its hardware alternative's, else the job's."""
        if step.hardware:
            return dict(self.hardware_demand).get(step.hardware[0], self.demand)
        return self.demand

    @property
    def currency(self) -> str:
        return str((self.prices or {}).get("currency") or "")


@dataclass(frozen=True)
class Estimate:
    price: float | None  # per GPU-hour, summed over the job's accelerator types (None: unknown)
    cost: float | None  # expected cost of the step's run (None: unknown or no run time)


def estimate(budget: Budget, step: Step, location: str) -> Estimate:
    if isinstance(step, RaceStep):
        members = [estimate(budget, m, step.member_location(i, location)) for i, m in enumerate(step.members)]
        known = [m for m in members if m.price is not None]
        if len(known) < len(members):
            return Estimate(None, None)
        costs = [m.cost for m in members]
        return Estimate(max(m.price for m in known),  # type: ignore[type-var]
                        None if None in costs else max(costs))  # type: ignore[type-var]
    total, demand = 0.0, budget.demand_of(step)
    for accelerator, gpus in demand:
        price = price_of(budget.prices, accelerator, step.strategy, location)
        if price is None:
            return Estimate(None, None)
        total += price * gpus
    if budget.expected_run_time is None:
        return Estimate(total / max(1, sum(g for _, g in demand)), None)
    hours = budget.expected_run_time.total_seconds() / 3600
    observed = step.preemptions_in(location) if isinstance(step, SpotStep) and step.observed_preemptions else None
    waste = 1 + PREEMPTION_WASTE * (budget.expected_preemptions if observed is None else observed) \
        if isinstance(step, SpotStep) else 1.0  # observed: the cost objective's rate for the region
    per_gpu = total / max(1, sum(g for _, g in demand))
    return Estimate(per_gpu, round(total * hours * waste, 4))


def refusal(budget: Budget | None, step: Step, location: str) -> str | None:
    """Why ``step`` may not run in ``location`` for money, or None."""
    if budget is None:
        return None
    caps = [(m, step.member_location(i, location)) for i, m in enumerate(step.members)] \
        if isinstance(step, RaceStep) else [(step, location)]
    for member, where in caps:
        cap = member.max_price_per_gpu_hour
        if cap is None:
            continue
        price = estimate(budget, member, where).price
        if price is None:
            return f"{member.strategy} in {where}: no price known, max_price_per_gpu_hour={cap:g} cannot be checked"
        if price > cap:
            return (f"{member.strategy} in {where}: {price:g} {budget.currency} per GPU-hour is over "
                    f"max_price_per_gpu_hour={cap:g}")
    if budget.remaining is None:
        return None
    found = estimate(budget, step, location)
    if found.cost is None:
        return f"{step.strategy} in {where}: no price known, its cost cannot be checked against the budget"
    if found.cost > budget.remaining:
        return (f"{step.strategy} in {location}: expected cost {found.cost:g} {budget.currency} is over what is "
                f"left of the budget ({budget.remaining:g} of {budget.remaining + budget.spent:g})"
                + (f"; {budget.note}" if budget.note else ""))
    return None


def rows(budget: Budget, positions: list[tuple[Step, str]]) -> list[dict[str, Any]]:
    """For ``plan check``: each position's price, expected cost and whether the budget allows it."""
    out = []
    for step, location in positions:
        found = estimate(budget, step, location)
        why = refusal(budget, step, location)
        out.append({"step": step.describe(), "location": location, "price_per_gpu_hour": found.price,
                    "expected_cost": found.cost, "currency": budget.currency, "allowed": why is None, "why": why})
    return out


def plan_check_cells(task: Any, step: Step, regions: list[str]) -> list[str]:
    """``plan check``'s COST cells of one step: ``us-central1: 6 USD, fits`` (or ``over: why``) per
    region; none when the task has no prices. The catalog is not read here (no task connection):
    a ``"catalog:<Variable>"`` task shows its table's prices."""
    from airflow_gpu_sched.orchestration.accounting import resolve_prices

    try:
        prices = resolve_prices(task.prices)
        demand = task.build_job(step=step).job_spec.accelerator_demand()
    except Exception:  # noqa: BLE001 (a Variable not set where the check runs: no cost column)
        return []
    if not prices:
        return []
    limit = getattr(task, "budget", None)
    budget = Budget(remaining=None if limit is None else float(limit), prices=prices,
                    demand=tuple((getattr(a, "value", str(a)), n) for a, n in demand.items()),
                    expected_run_time=task.expected_run_time if isinstance(task.expected_run_time, timedelta) else None)
    cells = []  # a templated expected_run_time (text until rendered): cost "?"
    for row in rows(budget, [(step, region) for region in regions]):
        cost = "?" if row["expected_cost"] is None else f"{row['expected_cost']:g} {row['currency']}".strip()
        cells.append(f"{row['location']}: {cost}, " + ("fits" if row["allowed"] else f"over: {row['why']}"))
    return cells


def check_budget_args(budget: Any, expected_run_time: timedelta | None, run_budget: Any = None) -> list[str]:
    """``budget=`` and ``run_budget=`` rules, each naming the field (checked when the DAG is parsed)."""
    found = []
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0):
        found.append(f"budget: must be a number >= 0 in the price table's currency (got {budget!r})")
    if run_budget is not None:
        try:
            run = _run_budget(run_budget)
            if not isinstance(run.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", run.name):
                found.append(f"run_budget.name: 1-64 letters, digits, '_' or '-' (got {run.name!r})")
            if isinstance(run.limit, bool) or not isinstance(run.limit, (int, float)) or run.limit < 0:
                found.append(f"run_budget.limit: must be a number >= 0 (got {run.limit!r})")
        except TypeError as exc:
            found.append(f"run_budget: a RunBudget(name, limit) or {{'name': ..., 'limit': ...}} ({exc})")
    if (budget is not None or run_budget is not None) and expected_run_time is None:
        found.append(f"{'budget' if budget is not None else 'run_budget'}: needs expected_run_time "
                     "(the expected cost is price x GPUs x run time)")
    return found


def budget_for(operator: Any, ledger: Any, context: Any = None) -> Budget | None:
    """The operator's budget as of now (None when neither ``budget=``, ``run_budget=`` nor a step's
    cap is set): prices resolved (the catalog's cached), GPUs from the job, spent from the ledger's
    attempts; with ``run_budget=`` its share of the DAG run's budget, reserved once per task
    instance (:mod:`.run_budget`) and kept in the ledger, so a retry neither reserves again nor
    spends twice."""
    steps = list(operator.plan) + [m for s in operator.plan if isinstance(s, RaceStep) for m in s.members]
    limit = getattr(operator, "budget", None)
    run = _run_budget(getattr(operator, "run_budget", None))
    if limit is None and run is None and all(s.max_price_per_gpu_hour is None for s in steps):
        return None
    from airflow_gpu_sched.orchestration.accounting import attempt_cost, resolve_prices

    prices = resolve_prices(operator.prices, operator.client)
    demand = operator.build_job().job_spec.accelerator_demand()
    spent = sum(attempt_cost(a, prices) or 0.0 for a in ledger.attempts)
    budget = Budget(remaining=None if limit is None else float(limit) - spent, prices=prices,
                    demand=tuple((getattr(a, "value", str(a)), n) for a, n in demand.items()),
                    expected_run_time=operator.expected_run_time, spent=spent,
                    hardware_demand=_hardware_demand(operator, steps))
    if run is None:
        return budget
    held = ledger.run_budget or _reserve(operator, budget, run, context)
    ledger.hold_run_budget(held)  # kept the first time only
    share = float(held["amount"]) - spent if held["holds"] else 0.0
    remaining = share if budget.remaining is None else min(budget.remaining, share)
    note = (f"run budget {run.name!r}: this task holds {held['amount']:g} of {run.limit:g}" if held["holds"] else
            f"run budget {run.name!r}: {held['why']}")
    return replace(budget, remaining=max(0.0, remaining), spent=float(held["amount"]) - max(0.0, remaining)
                   if held["holds"] else spent, note=note)


def _hardware_demand(operator: Any, steps: list[Step]) -> tuple[tuple[Any, tuple[tuple[str, int], ...]], ...]:
    """Each hardware alternative's GPUs held at once, from its own job (prices per accelerator)."""
    found = {}
    for step in steps:
        if step.hardware and step.hardware[0] not in found:
            held = operator.build_job(step=step).job_spec.accelerator_demand()
            found[step.hardware[0]] = tuple((getattr(a, "value", str(a)), n) for a, n in held.items())
    return tuple(found.items())


LEDGER_RUN_BUDGET = "run_budget"  # the submission ledger's record of this task's reservation (ledger.RUN_BUDGET_KEY)


def _run_budget(value: Any) -> Any:
    from airflow_gpu_sched.orchestration.run_budget import RunBudget

    if value is None or isinstance(value, RunBudget):
        return value
    return RunBudget(**value)  # {"name": ..., "limit": ...}: checked by check_budget_args


def task_key(run: Any, operator: Any, context: Any) -> str:
    """This task instance's reservation key: map index 0 is its own (``0 or -1`` made it -1)."""
    from airflow_gpu_sched.orchestration.run_budget import key_of

    index = getattr((context or {}).get("ti"), "map_index", None)
    return key_of(run, getattr(operator, "dag_id", "-"), str((context or {}).get("run_id") or "-"),
                  operator.task_id, -1 if index is None else int(index))


def _reserve(operator: Any, budget: Budget, run: Any, context: Any) -> dict[str, Any]:
    """Reserve the task's own budget, else the most its plan's steps may cost."""
    from airflow_gpu_sched.orchestration.run_budget import VariableStore, reserve

    amount: float | None = budget.remaining
    if amount is None:
        costs = [estimate(budget, step, location).cost for step, location in
                 ((operator.plan[i], loc) for i, loc in operator.positions())]
        amount = None if None in costs or not costs else max(costs)  # type: ignore[type-var]
    if amount is None:
        return {"key": None, "amount": 0.0, "holds": False,
                "why": "no price for every step: give budget= (this task's share) to reserve"}
    key = task_key(run, operator, context)
    holds = reserve(VariableStore(), run, key, amount, settle=run.settle)
    return {"key": key, "amount": amount, "holds": holds,
            "why": f"a reservation of {amount:g} was refused: the DAG run's other tasks hold the rest of {run.limit:g}"}


def settle_run_budget(ledger: Any, prices: Any) -> None:
    """When the task ends: what it really spent replaces its reservation (the rest is freed)."""
    held = ledger.run_budget or {}
    if not held.get("key") or not held.get("holds"):
        return
    from airflow_gpu_sched.orchestration.accounting import attempt_cost
    from airflow_gpu_sched.orchestration.run_budget import VariableStore, settle_spent

    settle_spent(VariableStore(), held["key"], sum(attempt_cost(a, prices) or 0.0 for a in ledger.attempts))


__all__ = ["LEDGER_RUN_BUDGET", "PREEMPTION_WASTE", "Budget", "Estimate", "budget_for", "settle_run_budget", "check_budget_args", "estimate", "plan_check_cells",
           "refusal", "rows", "task_key"]
