"""What the demo prints while it waits and at its end (pure: tested without running a DAG).

While ``airflow dags test`` runs, a line at least every :data:`EVERY` seconds: the DAG's jobs by
state when they change, else what it is waiting for (Airflow starting the run takes 30-45 s with
no job yet; a job queued for GPUs may not change for minutes). Issue 41: the demo was silent
that long, and its last line named 4 of the 7 DAGs it ran. At the end, every DAG it ran and
how it ended.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EVERY = 10.0  # seconds: the longest the demo stays silent while a DAG runs


@dataclass
class Progress:
    """One ``airflow dags test`` run being watched: says something when its jobs change, and at
    least every :data:`EVERY` seconds otherwise."""

    dag_id: str
    started: float  # the demo's start (monotonic): lines show the time since
    last_states: str | None = None
    last_time: float | None = None

    def line(self, states: list[str], now: float) -> str | None:
        """The line to print at ``now`` for jobs in ``states`` (e.g. ``["QUEUED"]``), or None."""
        text = ", ".join(f"{s}: {states.count(s)}" for s in dict.fromkeys(sorted(states)))
        changed = bool(text) and text != self.last_states
        due = self.last_time is None or now - self.last_time >= EVERY
        if not changed and not due:
            return None
        self.last_time = now
        stamp = f"  [{now - self.started:5.1f}s] {self.dag_id}"
        if changed:
            self.last_states = text
            return f"{stamp} jobs: {text}"
        if not text:
            return f"{stamp}: Airflow is starting the run (no job yet)"
        return f"{stamp}: still waiting (jobs: {text})"


@dataclass
class Summary:
    """Every DAG the demo ran and how it ended: in ``order`` (the demo runs some side by side, so
    they end in no fixed order), then any other in the order they ended."""

    results: list[tuple[str, str]] = field(default_factory=list)
    order: tuple[str, ...] = ()

    def ran(self, dag_id: str, result: str) -> None:
        self.results.append((dag_id, result))
        rank = {dag: i for i, dag in enumerate(self.order)}
        self.results.sort(key=lambda ended: rank.get(ended[0], len(rank)))  # stable: the rest as they ended

    def lines(self, seconds: float) -> list[str]:
        failed = [dag for dag, result in self.results if result != "succeeded"]
        head = (f"the demo ran {len(self.results)} example DAGs in {seconds:.0f}s of real time: "
                + (f"{len(failed)} failed" if failed else "all succeeded"))
        return [head, *(f"  {dag_id} {result}" for dag_id, result in self.results)]
