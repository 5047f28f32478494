"""The observed-capacity history under concurrent attempts, through the Task SDK's Variables
against the real in-process Execution API and metadata DB: attempts ending together keep every
observation (one key each, merged on read), compaction loses none, and the single JSON list the
earlier versions rewrote is still read.

The recorders are threads that each talk to the Execution API as a task would (one request at a
time, like the API server serves them); a barrier holds every recorder's first write until all
of them have read, the interleaving that lost an observation when the history was one Variable
rewritten by every attempt."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from airflow_gpu_sched.orchestration import observed

A, B = "us-central1", "us-east4"
H100 = "NVIDIA_H100_80GB"


def entry(region: str, to_running: float | None, at: datetime) -> dict:
    return {"region": region, "accelerator": H100, "strategy": "SPOT", "at": at.isoformat(),
            "to_running": to_running, "waited": to_running or 30.0, "stockout": to_running is None,
            "preemptions": 0}


class ExecutionApi:
    """The Task SDK's Variables for recorder threads, as a task has them: each call one request to the
    Execution API (in-process, on the session's metadata DB), served one at a time as the API server
    commits each in its own transaction. The barrier holds every recorder's first write until all of
    them are there."""

    def __init__(self, writers: int):
        from airflow.sdk.execution_time.supervisor import InProcessTestSupervisor

        self.client = InProcessTestSupervisor._api_client()
        self.lock = threading.Lock()
        self.first_write = threading.Barrier(writers, timeout=60) if writers > 1 else None
        self.local = threading.local()

    def send(self, msg):  # SUPERVISOR_COMMS.send, with self.lock held
        from airflow.sdk.execution_time import comms, request_handlers
        from airflow.sdk.execution_time.supervisor import set_supervisor_comms

        handlers = {comms.GetVariable: request_handlers.handle_get_variable,
                    comms.PutVariable: request_handlers.handle_put_variable,
                    comms.DeleteVariable: request_handlers.handle_delete_variable,
                    comms.GetVariableKeys: request_handlers.handle_get_variable_keys}
        with set_supervisor_comms(None):  # the server side of the call is not in a task
            return handlers[type(msg)](self.client, msg)[0]

    def call(self, method, *args, **kwargs):
        from airflow.sdk.execution_time.supervisor import set_supervisor_comms

        if method.__name__ == "set" and self.first_write and not getattr(self.local, "wrote", False):
            self.local.wrote = True
            self.first_write.wait()  # every recorder has read what it reads before its first write
        with self.lock, set_supervisor_comms(self):
            result = method(*args, **kwargs)
            return list(result) if method.__name__ == "keys" else result  # keys() is lazy


@pytest.fixture
def history(airflow_db, monkeypatch):
    """A clean history; yields a function that gives the Task SDK's Variables to ``writers`` threads."""
    from airflow.models import Variable as DbVariable
    from airflow.sdk import Variable

    def clean():
        for key in _db_keys():
            DbVariable.delete(key)

    def install(writers: int = 1) -> ExecutionApi:
        api = ExecutionApi(writers)
        for name in ("get", "set", "delete", "keys"):
            method = getattr(Variable, name)
            monkeypatch.setattr(Variable, name, staticmethod(
                lambda *args, _method=method, **kwargs: api.call(_method, *args, **kwargs)))
        return api

    clean()
    yield install
    clean()


def _db_keys() -> list[str]:
    from sqlalchemy import select

    from airflow.models import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        return list(session.scalars(select(Variable.key).where(Variable.key.startswith(observed.VARIABLE))))


def record_together(entries: list[dict], now: datetime) -> list[str | None]:
    problems: list[str | None] = [None] * len(entries)

    def recorder(i: int) -> None:
        problems[i] = observed.write(entries[i], now)

    threads = [threading.Thread(target=recorder, args=(i,)) for i in range(len(entries))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    return problems


def test_two_attempts_ending_together_keep_both_observations(history):
    now = datetime.now(timezone.utc)
    history(writers=2)
    assert record_together([entry(A, None, now), entry(B, 42.0, now)], now) == [None, None]
    kept, problem = observed.read()
    assert problem is None
    assert sorted((e["region"], e["stockout"]) for e in kept) == [(A, True), (B, False)]


@pytest.mark.parametrize("compact_at", [None, 1], ids=["no-compaction", "every-write-compacts"])
@pytest.mark.parametrize("recorders", [3, 8])
def test_n_concurrent_recorders_leave_n_observations(history, monkeypatch, recorders, compact_at):
    if compact_at is not None:
        monkeypatch.setattr(observed, "COMPACT_AT", compact_at)
    now = datetime.now(timezone.utc)
    history(writers=recorders)
    entries = [entry(A if i % 2 else B, float(i + 1), now - timedelta(seconds=i)) for i in range(recorders)]
    assert record_together(entries, now) == [None] * recorders
    kept, problem = observed.read()
    assert problem is None
    assert sorted(e["to_running"] for e in kept) == [float(i + 1) for i in range(recorders)]  # each once
    if compact_at == 1:
        assert len(_db_keys()) <= recorders  # compaction deleted what it merged


def test_a_history_written_by_the_previous_version_is_still_read(history, monkeypatch):
    from airflow.models import Variable

    now = datetime.now(timezone.utc)
    legacy = [entry(A, None, now - timedelta(days=2)), entry(B, 60.0, now - timedelta(days=1))]
    Variable.set(observed.VARIABLE, legacy, serialize_json=True)  # the list the old write() rewrote
    history()
    kept, problem = observed.read()
    assert problem is None
    assert [(e["region"], e["to_running"]) for e in kept] == [(A, None), (B, 60.0)]

    assert observed.write(entry(B, 5.0, now - timedelta(seconds=1)), now) is None
    assert [e["to_running"] for e in observed.read()[0]] == [None, 60.0, 5.0]

    monkeypatch.setattr(observed, "COMPACT_AT", 0)  # the next write merges the old list in and deletes it
    assert observed.write(entry(A, 7.0, now), now) is None
    assert [e["to_running"] for e in observed.read()[0]] == [None, 60.0, 5.0, 7.0]  # each once
    assert Variable.get(observed.VARIABLE, default_var=None) is None
    assert len(_db_keys()) == 1  # one chunk


def test_an_old_list_that_is_not_a_list_is_reported_and_the_rest_read(history):
    from airflow.models import Variable

    now = datetime.now(timezone.utc)
    Variable.set(observed.VARIABLE, {"not": "a list"}, serialize_json=True)
    history()
    assert observed.write(entry(B, 5.0, now), now) is None
    kept, problem = observed.read()
    assert [e["to_running"] for e in kept] == [5.0]
    assert problem == f"Variable {observed.VARIABLE} is not a JSON list"


def test_merge_keeps_each_observation_once_oldest_first_and_bounded():
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    one = {**entry(A, 1.0, now - timedelta(hours=2)), "id": "one"}
    two = {**entry(B, 2.0, now - timedelta(hours=1)), "id": "two"}
    old = {**entry(B, 3.0, now - observed.MAX_AGE - timedelta(seconds=1)), "id": "old"}
    legacy = entry(A, 4.0, now - timedelta(hours=3))
    # the same observation in two chunks (two compactions that read it), alone, and in the old list
    merged = observed.merge([[two, one], [one, old], two, [legacy, legacy], "junk", [None]], now)
    assert [e["to_running"] for e in merged] == [4.0, 1.0, 2.0]
    many = [{**entry(A, float(i), now - timedelta(minutes=i)), "id": str(i)} for i in range(observed.MAX_ENTRIES + 5)]
    kept = observed.merge([many], now)
    assert len(kept) == observed.MAX_ENTRIES and kept[-1]["to_running"] == 0.0  # the newest kept
