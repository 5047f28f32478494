"""Resubmits for hardware-shaped failures (``resubmit_on``, ``max_failure_resubmits``): the
classifier's data against real-shaped lines, the arguments' refusals, and the operators at the
wire: the emulator fails a job with a given exit code, message and log lines (scenario
``jobFailures``), the operator resubmits it from the same checkpoints under its own budget,
counted in the ledger across Airflow retries; a user failure is never resubmitted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
import requests

from airflow_gpu_sched.orchestration import resubmit
from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec, TrainingJobFailedNoRetry
from airflow_gpu_sched.orchestration.ledger import LEDGER_KEY
from tests.conftest import FAST, LOCATION, PROJECT
from tests.test_observe_metrics import StatsdSocket, statsd  # noqa: F401 (the fixture)
from tests.test_operators import Store

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)
CHECKPOINTS = "gs://bucket/resubmit"

# Real-shaped lines (sources in docs/resubmit.md)
NCCL = ("[E ProcessGroupNCCL.cpp:457] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1132079, "
        "OpType=ALLREDUCE, NumelIn=304640, NumelOut=304640, Timeout(ms)=1800000) ran for 1800035 milliseconds before "
        "timing out.")  # ai2cm/ace#348
NCCL_ABORT = ("[E ProcessGroupNCCL.cpp:471] Some NCCL operations have failed or timed out. Due to the asynchronous "
              "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.")
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"  # verl-project/verl#407
XID_79 = "NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, GPU has fallen off the bus."  # NVIDIA Xid catalog
XID_63 = "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
VERTEX_EXIT = "The replica workerpool0-0 exited with a non-zero status of {}. Termination reason: Error."  # #1504
USER_LINES = ["Traceback (most recent call last):", '  File "/app/train.py", line 12, in <module>',
              "ValueError: could not convert string to float: 'n/a'"]
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"
XID_13 = "NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0): Out Of Range Address"
ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


@pytest.fixture(autouse=True)
def _no_positions_from_other_tests():
    from airflow_gpu_sched.triggers import log_tail  # job ids repeat across resets (tests/test_job_logs.py)

    log_tail._IN_MEMORY.clear()


# ---------------------------------------------------------------------------------------- the classifier


@pytest.mark.parametrize("message, tail, rule", [
    (VERTEX_EXIT.format(1), NCCL, "nccl_timeout"),
    (VERTEX_EXIT.format(134), NCCL_ABORT, "nccl_timeout"),
    (VERTEX_EXIT.format(1), f"Traceback (most recent call last):\n{ECC}", "ecc_error"),
    (ECC, None, "ecc_error"),  # in the message itself
    (VERTEX_EXIT.format(1), XID_79, "xid"),
    (VERTEX_EXIT.format(1), XID_63, "xid"),
], ids=["nccl-watchdog", "nccl-abort", "ecc-in-log", "ecc-in-message", "xid-79", "xid-63"])
def test_the_built_in_classes_match_what_the_hardware_says(message, tail, rule):
    verdict = resubmit.classify(resubmit.policy(None, 1), message, tail)
    assert (verdict.kind, verdict.rule) == ("hardware", rule)
    assert verdict.matched and verdict.matched.lower() in ((message or "") + (tail or "")).lower()


@pytest.mark.parametrize("message, tail", [
    (VERTEX_EXIT.format(1), "\n".join(USER_LINES)),
    (VERTEX_EXIT.format(1), OOM),
    (VERTEX_EXIT.format(1), XID_13),  # an application's bad address: not the hardware's
    (VERTEX_EXIT.format(1), ILLEGAL),
    (VERTEX_EXIT.format(137), None),  # SIGKILL: the OOM killer as often as not
    (None, None),
], ids=["traceback", "cuda-oom", "xid-13", "illegal-access", "exit-137", "no-error"])
def test_everything_else_is_the_users_failure(message, tail):
    assert resubmit.classify(resubmit.policy(None, 3), message, tail).kind == "user"


def test_exit_codes_and_the_users_own_patterns():
    rules = resubmit.policy([134, r"Connection reset by peer", "ecc_error"], 2)
    assert [r.name for r in rules.rules] == ["exit_code_134", "pattern", "ecc_error"]
    assert resubmit.classify(rules, VERTEX_EXIT.format(134)).rule == "exit_code_134"
    assert resubmit.classify(rules, VERTEX_EXIT.format(1)).kind == "user"
    assert resubmit.classify(rules, VERTEX_EXIT.format(1), "NCCL WARN Connection Reset by peer").rule == "pattern"
    assert resubmit.classify(rules, VERTEX_EXIT.format(1), NCCL).kind == "user"  # not asked for
    assert resubmit.policy(None, 0) is None  # the default: never


def test_matching_reads_a_bounded_end_of_the_log():
    rules = resubmit.policy(None, 1)
    far = ECC + "\n" + "x" * resubmit.TAIL_CAP  # the crash scrolled out of what is read
    assert resubmit.classify(rules, VERTEX_EXIT.format(1), far).kind == "user"
    assert resubmit.classify(rules, VERTEX_EXIT.format(1), "x" * resubmit.TAIL_CAP + ECC).rule == "ecc_error"


@pytest.mark.parametrize("kwargs, field, rule", [
    (dict(resubmit_on=["("], max_failure_resubmits=1), "resubmit_on[0]", "not a valid regex"),
    (dict(resubmit_on=[r"(a+)+$"], max_failure_resubmits=1), "resubmit_on[0]", "quantifier inside a quantified"),
    (dict(resubmit_on=[0], max_failure_resubmits=1), "resubmit_on[0]", "exit code 0 is not 1..255"),
    (dict(resubmit_on=[134, 256], max_failure_resubmits=1), "resubmit_on[1]", "exit code 256 is not 1..255"),
    (dict(resubmit_on=["134"], max_failure_resubmits=1), "resubmit_on[0]", "as an int"),
    (dict(resubmit_on=[None], max_failure_resubmits=1), "resubmit_on[0]", "neither an exit code"),
    (dict(resubmit_on={"xid": 1}, max_failure_resubmits=1), "resubmit_on", "non-empty list"),
    (dict(resubmit_on=[], max_failure_resubmits=1), "resubmit_on", "non-empty list"),
    (dict(resubmit_on=["xid"]), "resubmit_on", "max_failure_resubmits=0 would resubmit nothing"),
    (dict(max_failure_resubmits=-1), "max_failure_resubmits", "integer 0..100"),
    (dict(max_failure_resubmits="2"), "max_failure_resubmits", "integer 0..100"),
])
def test_bad_arguments_are_refused_when_the_dag_is_parsed(kwargs, field, rule):
    with pytest.raises(InvalidTrainingSpec) as raised:
        _spot(**kwargs)
    assert [v.path for v in raised.value.violations] == [field]
    assert rule in raised.value.violations[0].rule and field in str(raised.value)


def test_the_engine_resubmits_while_the_ledgers_count_allows_and_marks_the_attempt():
    """Pure: the decision on a FAILED job, with the count read from the ledger's attempts."""
    from airflow_gpu_sched.orchestration.outcomes import Event
    from airflow_gpu_sched.orchestration.plan_engine import (Close, Fail, JobEnded, Note, Plan, State, Submit,
                                                              decide)
    from airflow_gpu_sched.orchestration.plans import SpotStep

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    plan = Plan.of([SpotStep()], LOCATION, project=PROJECT, quota_preflight=False, checkpoints=CHECKPOINTS,
                   resubmit=resubmit.policy(None, 2))
    ended = JobEnded(now=now, kind=Event.FAILED, job_name="j1", job_state="JOB_STATE_FAILED",
                     job_error=VERTEX_EXIT.format(1), log_tail=ECC, try_number=1)
    fresh = State.of({"job_name": "j1", "job_try": 1, "attempts": []})
    action = decide(plan, fresh, ended)
    assert isinstance(action, Submit) and action.position == 0
    closes = [e for e in action.effects if isinstance(e, Close)]
    assert [c.resubmit for c in closes] == ["ecc_error"]
    assert any("resubmitting (1 of max_failure_resubmits=2)" in e.text for e in action.effects if isinstance(e, Note))

    spent = State.of({"job_name": "j1", "job_try": 1, "attempts": [{"position": 0, "resubmit": "xid"},
                                                                     {"position": 0, "resubmit": "ecc_error"}]})
    action = decide(plan, spent, ended)
    assert isinstance(action, Fail) and action.failure.kind == "TrainingJobFailedNoRetry"
    assert [c.resubmit for c in action.effects if isinstance(c, Close)] == [None]  # not resubmitted: not counted
    assert any("is spent (2 resubmitted)" in e.text for e in action.effects if isinstance(e, Note))

    user = replace(ended, log_tail="\n".join(USER_LINES))
    assert isinstance(decide(plan, fresh, user), Fail)
    off = Plan.of([SpotStep()], LOCATION, project=PROJECT, quota_preflight=False)  # the default: never
    assert isinstance(decide(off, fresh, ended), Fail)


# ---------------------------------------------------------------------------------------- the emulator


def _failure(lines=None, message=None, exit_code=1, after=10):
    found = {"exitCode": exit_code, "afterSeconds": after}
    if lines is not None:
        found["logLines"] = lines
    if message is not None:
        found["message"] = message
    return found


def test_the_emulator_fails_a_job_with_the_given_exit_code_message_and_log_lines(fast_emulator):
    from airflow_gpu_sched.vertex import cloud_logging
    from airflow_gpu_sched.vertex.client import VertexClient

    fast_emulator.reset({**FAST, "jobFailures": [_failure([NCCL], exit_code=134), _failure(message=ECC)]})
    op = _spot()
    names = []
    with VertexClient(location=LOCATION, project=PROJECT, api_endpoint=fast_emulator.url) as client:
        for _ in range(3):
            names.append(client.create_custom_job(op.build_job()).name)
        fast_emulator.advance(200)
        jobs = [client.get_custom_job(n) for n in names]
        flt = cloud_logging.jobs_filter([names[0].rsplit("/", 1)[1]], min_severity="ERROR")
        lines, token = [], None
        for _ in range(100):  # pages may be short or empty and still go on (variant listPages: short)
            page = client.list_log_entries_page(flt, page_size=50, page_token=token)
            lines += [e.text_payload for e in page.entries]
            if not (token := page.next_page_token):
                break
    assert [j.state.value for j in jobs] == ["JOB_STATE_FAILED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]
    assert jobs[0].error.message.startswith(VERTEX_EXIT.format(134).split(" Termination")[0])
    assert jobs[0].error.code == 3 and jobs[1].error.message == ECC
    assert NCCL in lines  # the failing replica's log ends with the injected line


def test_job_failures_are_bounded_like_every_scenario_setting(fast_emulator):
    with pytest.raises(RuntimeError, match="400"):
        fast_emulator.reset({**FAST, "jobFailures": [{"exitCode": 0}]})
    with pytest.raises(RuntimeError, match="400"):
        fast_emulator.reset({**FAST, "jobFailures": [{"exitCode": 1, "logLines": ["x" * 5000]}]})


# ---------------------------------------------------------------------------------------- the operators at the wire


def _spot(**kw):
    from airflow_gpu_sched.operators import SpotTrainingOperator

    return SpotTrainingOperator(task_id=kw.pop("task_id", "train"), project_id=PROJECT, location=LOCATION,
                                image_uri="gcr.io/p/trainer:1", poll_interval=0.02, deferrable=kw.pop("deferrable", False),
                                base_output_dir=CHECKPOINTS, **{**A100, **kw})


def _jobs(emulator) -> list[dict]:
    """Every custom job, oldest first (every page: variant listPages: short)."""
    found, token = [], ""
    for _ in range(1000):
        page = requests.get(f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs",
                            params={"pageToken": token} if token else {}, timeout=5).json()
        found += page.get("customJobs", [])
        if not (token := page.get("nextPageToken")):
            break
    return list(reversed(found))


def _task_log(capfd) -> str:
    """The task log: Airflow's structlog writes it to the process's stdout/stderr."""
    out, err = capfd.readouterr()
    return out + err


class _Ti:
    """Airflow's task instance as the operator reads it; ``max_tries - retries + 1`` is the first try
    since the last clear (tests/test_retries.py)."""

    def __init__(self, try_number: int = 1, max_tries: int = 1):
        self.try_number, self.max_tries, self.map_index = try_number, max_tries, -1

    def xcom_push(self, key, value):
        pass


# where the hardware's words show: the job's error message, or only the failing replica's log
# (assumed: Google documents neither; the operator must resubmit under both)
WHERE = {"in-the-log": dict(lines=[*USER_LINES[:2], NCCL, NCCL_ABORT]),
         "in-the-message": dict(message=f"{VERTEX_EXIT.format(1)} {NCCL}")}


@pytest.mark.parametrize("where", list(WHERE))
def test_a_hardware_shaped_failure_is_resubmitted_once_and_the_second_job_succeeds(fast_emulator, where, capfd):
    fast_emulator.reset({**FAST, "jobFailures": [_failure(**WHERE[where])]})
    store = Store()
    result = _spot(max_failure_resubmits=2).execute({"task_state_store": store, "ti": _Ti()})
    jobs = _jobs(fast_emulator)
    assert [j["state"] for j in jobs] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]  # one job per resubmit
    assert {j["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for j in jobs} == {CHECKPOINTS}  # its checkpoints
    assert result["state"] == "JOB_STATE_SUCCEEDED" and result["job_name"] == jobs[1]["name"]
    assert [a.get("resubmit") for a in result["attempts"]] == ["nccl_timeout", None]
    assert [a.get("resubmit") for a in store.data[LEDGER_KEY]["attempts"]] == ["nccl_timeout", None]
    said = [line for line in _task_log(capfd).splitlines() if "hardware-shaped" in line]
    assert len(said) == 1 and "resubmitting (1 of max_failure_resubmits=2)" in said[0]
    assert "nccl_timeout: 'Watchdog caught collective operation timeout'" in said[0] and CHECKPOINTS in said[0]


def test_the_budget_is_respected_then_it_is_the_users_failure(fast_emulator, capfd):
    fast_emulator.reset({**FAST, "jobFailures": [_failure([ECC])] * 3})
    store = Store()
    with pytest.raises(TrainingJobFailedNoRetry) as raised:
        _spot(max_failure_resubmits=1, resubmit_on=["ecc_error"]).execute({"task_state_store": store, "ti": _Ti()})
    assert [j["state"] for j in _jobs(fast_emulator)] == ["JOB_STATE_FAILED"] * 2  # the first and its one resubmit
    assert ECC in str(raised.value)  # the failing replica's log in the error
    assert [a.get("resubmit") for a in store.data[LEDGER_KEY]["attempts"]] == ["ecc_error", None]
    assert "max_failure_resubmits=1 is spent (1 resubmitted): not resubmitted" in _task_log(capfd)


@pytest.mark.parametrize("kwargs", [dict(max_failure_resubmits=3), dict()], ids=["opted-in", "default"])
def test_a_user_failure_is_not_resubmitted_nor_is_anything_by_default(fast_emulator, kwargs):
    failures = [_failure(USER_LINES)] if kwargs else [_failure([NCCL])]  # by default not even the hardware's
    fast_emulator.reset({**FAST, "jobFailures": failures})
    store = Store()
    with pytest.raises(TrainingJobFailedNoRetry):
        _spot(**kwargs).execute({"task_state_store": store, "ti": _Ti()})
    assert len(_jobs(fast_emulator)) == 1
    assert [a.get("resubmit") for a in store.data[LEDGER_KEY]["attempts"]] == [None]


def test_the_count_survives_a_retry_that_finds_the_failed_job_unwatched(fast_emulator):
    """Try 1's worker dies once its job failed, before acting on it; try 2 finds the job FAILED,
    classifies it as its trigger would have, and resubmits it: still one job per resubmit."""
    fast_emulator.reset({**FAST, "jobFailures": [_failure([XID_79])]})
    store = Store()

    class DiesAfterTheEvent(type(_spot())):
        def wait_for_job(self, context, job_name, *args, **kwargs):
            event = super().wait_for_job(context, job_name, *args, **kwargs)
            if context["ti"].try_number == 1:
                raise SystemExit("worker killed")
            return event

    op = DiesAfterTheEvent(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                           poll_interval=0.02, deferrable=False, base_output_dir=CHECKPOINTS,
                           max_failure_resubmits=1, retries=1, **A100)  # with _Ti's max_tries: no clear between
    with pytest.raises(SystemExit):
        op.execute({"task_state_store": store, "ti": _Ti(1)})
    assert len(_jobs(fast_emulator)) == 1
    result = op.execute({"task_state_store": store, "ti": _Ti(2)})  # an Airflow retry
    assert [j["state"] for j in _jobs(fast_emulator)] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]
    assert [a.get("resubmit") for a in result["attempts"]] == ["xid", None]


@pytest.fixture
def airflow(airflow_db, fast_emulator):
    return fast_emulator


@pytest.mark.parametrize("second, deferrable", [("succeeds", False), ("succeeds", True),
                                                ("fails-hardware-shaped-again", False)])
def test_an_airflow_retry_between_resubmits_re_attaches_and_keeps_the_count(airflow, second, deferrable):
    """dag.test(): try 1 resubmits after a hardware-shaped failure, then its worker dies while
    waiting for the new job; try 2 re-attaches to that job (no third job); when it too fails
    hardware-shaped, the ledger's count says the budget (1) is spent."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator

    failures = [_failure([NCCL])] + ([_failure([NCCL])] if second != "succeeds" else [])
    airflow.reset({**FAST, "jobFailures": failures})

    class DiesWaitingForTheResubmit(SpotTrainingOperator):
        def wait_for_job(self, context, job_name, *args, **kwargs):
            if context["ti"].try_number == 1 and job_name != _jobs(airflow)[0]["name"]:
                raise SystemExit("worker killed")
            return super().wait_for_job(context, job_name, *args, **kwargs)

    with DAG(f"resubmit_retry_{second.replace('-', '_')}_{deferrable}", schedule=None, start_date=START) as dag:
        DiesWaitingForTheResubmit(task_id="train", project_id=PROJECT, location=LOCATION,
                                  image_uri="gcr.io/p/trainer:1", poll_interval=0.02, retries=2,
                                  retry_delay=timedelta(0), base_output_dir=CHECKPOINTS, max_failure_resubmits=1,
                                  deferrable=deferrable, **A100)
    from tests.airflow_harness import run_dag

    result = run_dag(dag, logical_date=START)
    jobs = _jobs(airflow)
    ledger = result.task_state_store["train"][LEDGER_KEY]
    assert len(jobs) == 2 and result["train"].try_number == 2
    assert [a.get("resubmit") for a in ledger["attempts"]] == ["nccl_timeout", None]
    if second == "succeeds":
        assert result["train"].state == "success" and jobs[1]["state"] == "JOB_STATE_SUCCEEDED"
    else:
        assert result["train"].state == "failed" and ledger["failed"]["kind"] == "TrainingJobFailedNoRetry"


def test_the_resubmit_metric_says_why(statsd, fast_emulator):  # noqa: F811 (the fixture)
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator
    from tests.airflow_harness import run_dag

    fast_emulator.reset({**FAST, "jobFailures": [_failure([ECC]), _failure(message=VERTEX_EXIT.format(134))]})
    dag_id = f"resubmit_metrics_{'tagged' if statsd.tagged else 'plain'}"
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        SpotTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                             poll_interval=0.02, base_output_dir=CHECKPOINTS, max_failure_resubmits=2,
                             resubmit_on=["hardware", 134], **A100)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success" and len(_jobs(fast_emulator)) == 3
    sent = [(name, tags, value) for name, tags, value, kind in statsd.packets() if "failure_resubmits" in name]
    modern = [(tags, value) for name, tags, value in sent if name == "airflow.gpu_sched.failure_resubmits"]
    assert [value for _, value in modern] == [1, 1]
    legacy = [value for name, _, value in sent if name == f"airflow.gpu_sched.failure_resubmits.{dag_id}.train.SPOT"]
    assert legacy == [1, 1]
    if statsd.tagged:
        assert [tags["reason"] for tags, _ in modern] == ["ecc_error", "exit_code_134"]
