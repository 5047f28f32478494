"""The reaper: the pure decision (two sightings ``grace`` apart, a re-read before the cancel) and
its pass against the emulator (a real HTTP server), with the task instance states a triggerer's
supervisor would answer given by the test."""

from __future__ import annotations

import asyncio
import logging

import pytest

from airflow_gpu_sched.orchestration import deployment as deployments
from airflow_gpu_sched.orchestration.job_types import CUSTOM_JOB
from airflow_gpu_sched.tools.platform import JobRow, Orphan
from airflow_gpu_sched.triggers import CustomJobTrigger
from airflow_gpu_sched.triggers import poller as poller_module
from airflow_gpu_sched.triggers import reaper as reaper_module
from airflow_gpu_sched.triggers.reaper import Reaper, Sightings, task_rows
from airflow_gpu_sched.vertex.client import AsyncVertexClient, VertexClient
from tests.conftest import LOCATION, PROJECT, every_custom_job

SECRET = "s3cr3t-token-value"
RUN = "manual__2026-12-02T10:00:00+00:00"
RUN_LABEL = "manual__2026-12-02t10-00-00-00-00"


def _job(emulator, dag="train_dag", task="train", run=RUN_LABEL, try_number="1", run_seconds=100_000,
         deployment: str | None = "") -> str:
    """A job as the operator labels it; ``deployment`` "": this deployment's (the test's config),
    None: no airflow-deployment label (a job submitted before the label existed)."""
    labels = {"managed-by": "airflow-gpu-sched", "airflow-dag": dag, "airflow-task": task, "airflow-try": try_number}
    if deployment is not None:
        labels["airflow-deployment"] = deployment or deployments.configured()
    if run:
        labels["airflow-run"] = run
    body = {"displayName": "r", "labels": labels, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1",
                          "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_seconds)},
                                  {"name": "API_TOKEN", "value": SECRET}]}}]}}
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url) as client:
        return client.create_custom_job(body).name


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class States:
    """What GetTaskStates answers, per (dag, task); a list is answered one item per read."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.reads: list[tuple[str, str]] = []

    async def __call__(self, dag_id: str, task_id: str):
        self.reads.append((dag_id, task_id))
        answer = self.answers.get((dag_id, task_id), {})
        if isinstance(answer, list):
            return answer.pop(0) if len(answer) > 1 else answer[0]
        return answer


def _state(emulator, name: str) -> str:
    return {j["name"]: j["state"] for j in every_custom_job(emulator)}[name]


async def _passes(reaper: Reaper, clock: Clock, count: int, step: float) -> list[list[Orphan]]:
    """``count`` passes, ``step`` seconds apart on the reaper's clock."""
    client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=_EMULATOR_URL[0])
    found = []
    for _ in range(count):
        found.append(await reaper.reap_once(client))
        clock.now += step
    return found


_EMULATOR_URL: list[str] = []


@pytest.fixture(autouse=True)
def this_deployment(monkeypatch):
    """The reapers here run outside a triggerer (no Variable to read): the id from the option."""
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "test-deployment")


@pytest.fixture
def emu(fast_emulator):
    _EMULATOR_URL[:] = [fast_emulator.url]
    return fast_emulator


# ---------------------------------------------------------------------------------- the decision


def _orphan(name: str) -> Orphan:
    return Orphan(JobRow(name, "custom_job", "d", "t", None, "r", "1", None, "JOB_STATE_QUEUED", None, None, None),
                  "task instance is failed")


def test_one_sighting_is_never_enough_however_long_the_grace():
    sightings = Sightings()
    assert sightings.sight([_orphan("a")], set(), now=10.0, grace=0.0) == []
    assert [o.job.name for o in sightings.sight([_orphan("a")], set(), now=10.5, grace=0.0)] == ["a"]


def test_a_job_is_due_only_grace_after_its_first_sighting():
    sightings = Sightings()
    assert sightings.sight([_orphan("a")], set(), now=0.0, grace=60.0) == []
    assert sightings.sight([_orphan("a")], set(), now=59.0, grace=60.0) == []
    assert [o.job.name for o in sightings.sight([_orphan("a")], set(), now=60.0, grace=60.0)] == ["a"]


def test_a_job_seen_owned_again_starts_the_count_again():
    sightings = Sightings()
    sightings.sight([_orphan("a")], set(), now=0.0, grace=60.0)
    assert sightings.sight([], set(), now=30.0, grace=60.0) == []  # a retry re-attached: owned
    assert sightings.sight([_orphan("a")], set(), now=61.0, grace=60.0) == []  # orphaned again: a new first sighting
    assert "a" in sightings.first_seen and sightings.first_seen["a"] == 61.0


def test_a_job_whose_owners_were_unreadable_keeps_its_first_sighting():
    sightings = Sightings()
    sightings.sight([_orphan("a")], set(), now=0.0, grace=60.0)
    assert sightings.sight([], {"a"}, now=30.0, grace=60.0) == []
    assert sightings.first_seen == {"a": 0.0}


def test_task_rows_reads_plain_and_mapped_keys_of_one_task_only():
    rows = task_rows("d", "train", {"r1": {"train": "failed"}, "r2": {"train_3": "deferred", "train_x": "running",
                                                                       "other": "running"}})
    assert sorted((r.run_id, r.map_index, r.state) for r in rows) == [("r1", -1, "failed"), ("r2", 3, "deferred")]


# ---------------------------------------------------------------------------------- the pass, at the wire


async def test_a_job_whose_task_failed_is_cancelled_on_the_second_pass_and_logged(emu, caplog):
    name = _job(emu)
    live = _job(emu, task="other")
    states = States({("train_dag", "train"): {RUN: {"train": "failed"}},
                     ("train_dag", "other"): {RUN: {"other": "deferred"}}})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=60, clock=clock)
    with caplog.at_level(logging.INFO, logger=reaper_module.__name__):
        first, second = await _passes(reaper, clock, 2, step=60)
    assert first == [] and [o.job.name for o in second] == [name]
    assert _state(emu, name) in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    assert _state(emu, live) in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")
    assert emu.stats()["cancels"] == 1
    [line] = [r.getMessage() for r in caplog.records if "reaper: cancelled" in r.getMessage()]
    assert name in line and "dag=train_dag task=train" in line and f"run={RUN_LABEL}" in line and "try=1" in line
    assert "task instance is failed" in line
    assert SECRET not in caplog.text and "EMULATOR_RUN_SECONDS" not in caplog.text


async def test_a_job_whose_dag_run_was_deleted_is_cancelled(emu):
    name = _job(emu)
    states = States({("train_dag", "train"): {"manual__other": {"train": "success"}}})  # only another run is left
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=10, clock=clock)
    _, second = await _passes(reaper, clock, 2, step=10)
    assert [(o.job.name, o.why) for o in second] == [(name, "no task instance of it in the metadata DB")]
    assert emu.stats()["cancels"] == 1


async def test_a_job_a_live_try_owns_is_never_cancelled(emu):
    _job(emu)
    alive = ["running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"]
    states = States({("train_dag", "train"): [{RUN: {"train": s}} for s in alive]})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=1, clock=clock)
    assert await _passes(reaper, clock, len(alive), step=5) == [[]] * len(alive)
    assert emu.stats()["cancels"] == 0 and reaper.sightings.first_seen == {}


async def test_a_retry_re_attaching_during_a_pass_is_not_cancelled(emu):
    """The race: a clear leaves the task instance with no state (not alive) on two passes, and the
    rerun re-attaches (``running``) between the second pass's list and its cancel: the re-read just
    before the cancel sees it, nothing is cancelled, and the count starts again."""
    name = _job(emu)
    cleared, rerun = {RUN: {"train": None}}, {RUN: {"train": "running"}}
    states = States({("train_dag", "train"): [cleared, cleared, rerun]})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=10, clock=clock)
    assert await _passes(reaper, clock, 3, step=10) == [[], [], []]
    assert states.reads.count(("train_dag", "train")) == 4  # pass 1, pass 2, the re-read before the cancel, pass 3
    assert emu.stats()["cancels"] == 0 and _state(emu, name) != "JOB_STATE_CANCELLED"
    assert reaper.sightings.first_seen == {}
    assert [j["name"] for j in every_custom_job(emu)] == [name]


async def test_unreadable_or_unknown_owners_leave_the_job_alone(emu):
    unknown = _job(emu, dag="gone_dag")  # no task instance at all: maybe a DAG id its label does not spell
    unreadable = _job(emu, dag="busy_dag")
    states = States({("gone_dag", "train"): {}, ("busy_dag", "train"): None})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=1, clock=clock)
    assert await _passes(reaper, clock, 3, step=5) == [[], [], []]
    assert emu.stats()["cancels"] == 0
    assert {_state(emu, unknown), _state(emu, unreadable)}.isdisjoint({"JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"})


async def test_a_cancelling_job_is_not_cancelled_again(emu):
    states = States({("train_dag", "train"): {RUN: {"train": "failed"}}})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=1, clock=clock)
    emu.reset({**__import__("tests.conftest").conftest.FAST, "cancelSeconds": 100_000})  # CANCELLING for long
    name = _job(emu)
    assert [[o.job.name for o in p] for p in await _passes(reaper, clock, 4, step=5)] == [[], [name], [], []]
    assert _state(emu, name) == "JOB_STATE_CANCELLING" and emu.stats()["cancels"] == 1


async def test_an_ended_job_is_not_listed_nor_cancelled(emu):
    name = _job(emu, run_seconds=1)
    emu.advance(600)
    deadline = asyncio.get_running_loop().time() + 30
    while _state(emu, name) != "JOB_STATE_SUCCEEDED":
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    states = States({("train_dag", "train"): {RUN: {"train": "failed"}}})
    clock = Clock()
    reaper = Reaper(CUSTOM_JOB, states, interval=1, grace=1, clock=clock)
    assert await _passes(reaper, clock, 2, step=5) == [[], []]
    assert emu.stats()["cancels"] == 0


async def test_the_shared_poller_runs_the_reaper_once_per_interval(emu, monkeypatch):
    """In the poller: a waiting trigger keeps the poller (and its reaper) alive; the job of a
    failed task is cancelled; the watched job is not; one list per reaper pass."""
    orphan = _job(emu)
    watched = _job(emu, task="waits")
    states = States({("train_dag", "train"): {RUN: {"train": "failed"}},
                     ("train_dag", "waits"): {RUN: {"waits": "deferred"}}})
    key = ("google_cloud_default", None, PROJECT, LOCATION)
    loop_key = (id(asyncio.get_running_loop()), key, CUSTOM_JOB.key)
    reaper = Reaper(CUSTOM_JOB, states, interval=0.2, grace=0.3)
    monkeypatch.setitem(reaper_module._REAPERS, loop_key, reaper)
    trigger = CustomJobTrigger(watched, poll_interval=0.05)
    task = asyncio.create_task(anext(trigger.run().__aiter__()))
    deadline = asyncio.get_running_loop().time() + 30
    while _state(emu, orphan) not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"):
        assert asyncio.get_running_loop().time() < deadline, reaper.passes
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert poller_module._POLLERS == {}
    assert _state(emu, watched) not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    assert emu.stats()["cancels"] == 1 and reaper.passes >= 2 and reaper.calls == reaper.passes + 1


def test_the_settings_come_from_gpu_sched_with_the_provider_defaults(monkeypatch):
    from airflow_gpu_sched.provider import config

    options = config()["gpu_sched"]["options"]
    monkeypatch.delenv("AIRFLOW__GPU_SCHED__REAPER_INTERVAL", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_SCHED__REAPER_GRACE", raising=False)
    assert reaper_module.settings() == (float(options["reaper_interval"]["default"]),
                                        float(options["reaper_grace"]["default"]))
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__REAPER_INTERVAL", "2")
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__REAPER_GRACE", "not a number")
    assert reaper_module.settings() == (2.0, reaper_module.DEFAULT_GRACE)


# ---------------------------------------------------------------------------------- two deployments, one project

ACTIVE = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")


@pytest.mark.parametrize("staging_states", [
    {RUN: {"train": "failed"}},  # staging ran the same DAG run, and its copy ended
    {"manual__other": {"train": "success"}},  # staging has no such run
], ids=["staging-copy-ended", "staging-has-no-such-run"])
async def test_a_deployment_reaps_only_its_own_jobs_in_a_shared_project(emu, monkeypatch, caplog, staging_states):
    """Staging and prod share the project, the region and the DAG: staging's reaper must never
    cancel prod's running job, nor a job with no deployment label; it still reaps its own orphan."""
    prods = _job(emu, deployment="prod")  # prod's task is deferred on it
    legacy = _job(emu, deployment=None, task="old")  # submitted before the label existed; its task failed
    stagings = _job(emu, deployment="staging", task="eval")  # staging's own orphan
    clock = Clock()
    staging = Reaper(CUSTOM_JOB, States({
        ("train_dag", "train"): staging_states, ("train_dag", "old"): {RUN: {"old": "failed"}},
        ("train_dag", "eval"): {RUN: {"eval": "failed"}}}), interval=1, grace=10, clock=clock)
    prod = Reaper(CUSTOM_JOB, States({("train_dag", "train"): {RUN: {"train": "deferred"}}}), interval=1, grace=10,
                  clock=clock)
    cancelled: list[str] = []
    client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emu.url)
    with caplog.at_level(logging.INFO, logger=reaper_module.__name__):
        for _ in range(3):
            for reaper, config in ((staging, "staging"), (prod, "prod")):  # each triggerer, its own [gpu_sched]
                monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", config)
                cancelled += [o.job.name for o in await reaper.reap_once(client)]
            clock.now += 10
    assert cancelled == [stagings]
    assert _state(emu, prods) in ACTIVE and _state(emu, legacy) in ACTIVE
    assert emu.stats()["cancels"] == 1
    assert prods not in caplog.text and legacy not in caplog.text
    assert (staging.deployment, prod.deployment) == ("staging", "prod")


async def test_a_bad_deployment_id_cancels_nothing_and_says_why(emu, monkeypatch, caplog):
    _job(emu, deployment="prod-eu")
    monkeypatch.setenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID", "Prod EU")
    reaper = Reaper(CUSTOM_JOB, States({("train_dag", "train"): {RUN: {"train": "failed"}}}), interval=1,
                    grace=1, clock=Clock())
    client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emu.url)
    with caplog.at_level(logging.ERROR, logger=reaper_module.__name__):
        assert await reaper.reap_once(client) == [] and await reaper.reap_once(client) == []
    assert reaper.deployment is None and emu.stats()["cancels"] == 0 and reaper.calls == 0
    assert "[gpu_sched] deployment_id" in caplog.text and "'Prod EU' is not a label value" in caplog.text


async def test_without_an_id_and_outside_a_triggerer_the_reaper_cancels_nothing(emu, monkeypatch):
    _job(emu, deployment="dep-0123456789abcdef")
    monkeypatch.delenv("AIRFLOW__GPU_SCHED__DEPLOYMENT_ID")
    reaper = Reaper(CUSTOM_JOB, States({("train_dag", "train"): {RUN: {"train": "failed"}}}), interval=1,
                    grace=0, clock=Clock())
    client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=emu.url)
    assert await reaper.reap_once(client) == [] and reaper.deployment is None and reaper.calls == 0


async def test_a_list_that_never_ends_gives_the_pass_up():
    """An endpoint that answers the same nextPageToken forever: the pass stops on the repeat (it
    paged on forever before), cancels nothing, and maybe_reap keeps the poll alive."""
    from tests.test_cli_hostile import Hostile

    server = Hostile("same")
    try:
        client = AsyncVertexClient(location=LOCATION, project=PROJECT, api_endpoint=server.url)
        clock = Clock()
        reaper = Reaper(CUSTOM_JOB, States({}), interval=1, grace=0, clock=clock, deployment="tests")
        with pytest.raises(RuntimeError, match="did not end"):
            await reaper.reap_once(client)
        assert server.requests == 2 == reaper.calls
        clock.now += 5  # a pass is due
        assert await reaper.maybe_reap(client) == [] and server.requests == 4  # logged, not raised
    finally:
        server.close()
