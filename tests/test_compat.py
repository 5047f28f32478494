"""``airflow_gpu_sched/compat.py``, the one place that knows Airflow versions, and what it carries
on the Airflow lines without a ``task_state_store`` (3.1, 3.2): the ledger in the try's XCom, a
retry re-attaching by the job's labels (docs/compatibility.md).

Runs in every venv of the matrix (tests/matrix.py): the capabilities asserted are those of the
Airflow installed. On 3.3 the 3.1/3.2 path is run too, by hiding the store from compat (the name
it looks for), so the main venv covers it: Airflow's own clearing of the try's XComs at a retry
is real in both.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from pathlib import Path

import pytest

from airflow_gpu_sched import compat
from tests.conftest import LOCATION, PROJECT

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "airflow_gpu_sched"
AIRFLOW = tuple(int(p) for p in version("apache-airflow-core").split(".")[:2])
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=1)


# ---------------------------------------------------------------------------- the names and capabilities


def test_the_capabilities_are_those_of_the_installed_airflow():
    assert compat.summary() == {"HAS_TASK_STATE_STORE": AIRFLOW >= (3, 3), "TRIGGERS_GET_ON_KILL": AIRFLOW >= (3, 3),
                                "PROVIDER_CLI": AIRFLOW >= (3, 2)}
    assert compat.HAS_TASK_STATE_STORE is compat.capability("HAS_TASK_STATE_STORE")


@pytest.mark.parametrize("name", sorted(compat.MOVED))
def test_every_moved_name_resolves_on_this_airflow(name):
    if name == "NEVER_EXPIRE" and AIRFLOW < (3, 3):  # the store's retention: no store, no name
        assert compat.resolve(name, None) is None
        return
    assert compat.resolve(name) is not None
    assert getattr(compat, name) is compat.resolve(name)


def test_a_moved_name_is_read_at_each_use_so_a_patch_of_airflows_module_is_seen(monkeypatch):
    import airflow.sdk.log

    from airflow_gpu_sched.vertex.client import auth

    masked = []
    monkeypatch.setattr(airflow.sdk.log, "mask_secret", lambda secret, name=None: masked.append(secret))
    assert compat.mask_secret is airflow.sdk.log.mask_secret
    auth.mask_secret("s3cr3t-value")
    assert masked == ["s3cr3t-value"]


def test_a_name_gone_from_its_new_home_is_found_in_the_old_one(monkeypatch):
    import airflow.configuration

    monkeypatch.setitem(compat.MOVED, "conf", ("airflow.sdk.no_such_module:conf", "airflow.configuration:conf"))
    compat._home.cache_clear()
    try:
        assert compat.conf is airflow.configuration.conf
    finally:
        monkeypatch.undo()
        compat._home.cache_clear()


def test_a_name_no_home_has_is_an_import_error_naming_every_home_tried(monkeypatch):
    monkeypatch.setitem(compat.MOVED, "Nothing", ("airflow.sdk.no_such:Nothing", "airflow.exceptions:Nothing"))
    compat._home.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"Nothing not found in this Airflow \(tried airflow\.sdk\.no_such:"
                                              r"Nothing, airflow\.exceptions:Nothing\)"):
            compat.resolve("Nothing")
        assert compat.resolve("Nothing", None) is None
    finally:
        monkeypatch.undo()
        compat._home.cache_clear()


def test_importing_compat_imports_no_airflow():
    code = "import sys, airflow_gpu_sched.compat; print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# every home of a moved name (the module paths), and the shapes of a version test
MOVED_MODULES = sorted({home.split(":")[0] for homes in compat.MOVED.values() for home in homes
                        if not home.startswith("airflow_gpu_sched")})
VERSION_TESTS = [r"airflow\.__version__", r"version\(\s*['\"]apache-airflow", r"AIRFLOW_V_\d", r"packaging\.version",
                 r"import.*\b(NEVER_EXPIRE|amask_secret)\b"]


def _offences(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if any(re.search(rf"(from|import)\s+{re.escape(module)}(\s|$)", code) for module in MOVED_MODULES):
            found.append(f"{number}: {line.strip()}")
        elif any(re.search(pattern, code) for pattern in VERSION_TESTS):
            found.append(f"{number}: {line.strip()}")
    return found


def test_no_module_but_compat_imports_a_moved_name_or_tests_a_version():
    found = [f"{path.relative_to(REPO)}:{hit}" for path in sorted(PACKAGE.rglob("*.py")) if path.name != "compat.py"
             for hit in _offences(path.read_text())]
    assert found == []


def test_the_check_above_sees_each_shape():
    shapes = ["from airflow.sdk.configuration import conf", "from airflow.exceptions import AirflowException",
              "    from airflow.dag_processing.dagbag import DagBag", "import airflow.stats",
              "if airflow.__version__ >= '3.2':", "AIRFLOW_V_3_2_PLUS = True",
              "from airflow.sdk.execution_time.context import NEVER_EXPIRE",
              "from airflow.sdk.log import amask_secret"]
    assert [len(_offences(shape)) for shape in shapes] == [1] * len(shapes)
    assert _offences("from airflow.sdk import BaseOperator  # airflow.configuration is not moved here") == []


# ---------------------------------------------------------------------------- a retry without a kept ledger


class _Job:
    def __init__(self, name, labels, state="JOB_STATE_RUNNING", create_time="2026-01-01T00:00:00Z"):
        from airflow_gpu_sched.vertex.enums import JobState

        self.name, self.labels, self.create_time = name, labels, create_time
        self.state = JobState(state)

    def is_terminal(self):
        return self.state.value in {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
                                    "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED"}


def _labels(tried, key="k" * 32, position="0", **more):
    return {"airflow-try": str(tried), "gpu-sched-submission": key, "gpu-sched-position": position, **more}


def test_a_retry_takes_on_the_one_live_job_of_an_earlier_try_since_the_clear():
    from airflow_gpu_sched.operators.reattach import choose

    live = _Job("j2", _labels(2, position="1"))
    jobs = [_Job("j1", _labels(1), "JOB_STATE_CANCELLED"), live, _Job("j0", _labels(0))]  # j0: before the clear
    assert choose(jobs, {}, try_number=3, first_try=1, positions=2) == (live, 1)


def test_a_retry_takes_on_the_newest_succeeded_job_when_none_is_live():
    from airflow_gpu_sched.operators.reattach import choose

    old = _Job("a", _labels(1), "JOB_STATE_SUCCEEDED", "2026-01-01T00:00:00Z")
    new = _Job("b", _labels(2), "JOB_STATE_SUCCEEDED", "2026-01-01T01:00:00Z")
    assert choose([new, old, _Job("c", _labels(2), "JOB_STATE_FAILED")], {}, 3, 1, 1) == (new, 0)


@pytest.mark.parametrize("jobs", [
    [_Job("a", _labels(1)), _Job("b", _labels(1, key="b" * 32))],  # a race's members: not adopted
    [_Job("a", _labels(3))],  # this try's own (or a later one's)
    [_Job("a", _labels(1, **{"airflow-map-index": "2"}))],  # another map index's
    [_Job("a", _labels(1, position="5"))],  # a position the plan does not have
    [_Job("a", {"airflow-try": "1", "gpu-sched-position": "0"})],  # no submission key
    [_Job("a", _labels(1), "JOB_STATE_FAILED")],  # ended: the earlier try saw it, or the plan cannot know
])
def test_a_retry_takes_on_nothing_it_cannot_be_sure_of(jobs):
    from airflow_gpu_sched.operators.reattach import choose

    assert choose(jobs, {}, try_number=3, first_try=1, positions=1) is None


def test_the_label_filter_is_one_the_service_takes(fast_emulator):
    from airflow_gpu_sched.operators import SpotTrainingOperator
    from airflow_gpu_sched.operators.reattach import identity_filter

    op = SpotTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/t:1",
                              base_output_dir="gs://b/o", **A100)
    mine = {"managed-by": "airflow-gpu-sched", "airflow-dag": "d", "airflow-task": "train", "airflow-run": "r1"}
    client = op.client()
    ours = client.create_custom_job(op.build_job({**mine, "airflow-try": "1"}))
    client.create_custom_job(op.build_job({**mine, "airflow-run": "r2"}))  # another run's
    listed = list(op.job_kind.list_all(client, identity_filter({**mine, "airflow-try": "2"}), 50))
    assert [op.job_kind.view(j).name for j in listed] == [ours.name]


@pytest.fixture
def no_task_state_store(monkeypatch):
    """compat as on Airflow 3.1/3.2: no ``task_state_store`` (its name not found), so the ledger
    lives in the try's XCom; the test's DAG drops the store from the context as those do."""
    if compat.HAS_TASK_STATE_STORE:
        monkeypatch.setitem(compat.MOVED, "NEVER_EXPIRE", ("airflow.sdk.no_such_module:NEVER_EXPIRE",))
    compat._home.cache_clear()
    compat.capability.cache_clear()
    yield
    monkeypatch.undo()
    compat._home.cache_clear()
    compat.capability.cache_clear()


@pytest.mark.parametrize("run_seconds", ["300", "1"], ids=["live", "succeeded"])
def test_a_retry_without_a_task_state_store_re_attaches_to_its_job_by_labels(airflow_db, fast_emulator,
                                                                             no_task_state_store, run_seconds):
    """The first try dies right after its create; the retry (Airflow cleared that try's XComs,
    the ledger with them) finds the job by its labels: one job, the retry's result is its."""
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import SpotTrainingOperator
    from tests.airflow_harness import run_dag

    class OldAirflow(SpotTrainingOperator):
        def execute(self, context):
            context.pop("task_state_store", None)  # as on 3.1/3.2 (nothing on those)
            return super().execute(context)

        def wait_for_job(self, context, job_name, *args, **kwargs):
            if context["ti"].try_number == 1:
                raise SystemExit("worker killed")
            return super().wait_for_job(context, job_name, *args, **kwargs)

    with DAG("retry_without_store", schedule=None, start_date=START) as dag:
        OldAirflow(task_id="train", project_id=PROJECT, location=LOCATION, image_uri="gcr.io/p/trainer:1",
                   poll_interval=0.02, retries=1, retry_delay=timedelta(0), base_output_dir="gs://b/o",
                   env={"EMULATOR_RUN_SECONDS": run_seconds}, **A100)

    result = run_dag(dag, logical_date=START)
    assert result.state == "success" and result["train"].try_number == 2
    assert fast_emulator.stats()["jobsCreated"] == {"SPOT": 1}
    job = result["train"].return_value["job_name"]
    assert result.task_state_store["train"]["airflow_gpu_sched.ledger"]["completed"] is True
    assert job.startswith(f"projects/{PROJECT}/locations/{LOCATION}/customJobs/")


def test_a_dag_bag_of_one_file_holds_that_files_dags_only(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "True")  # 3.1/3.2 would add Airflow's examples
    dag_file = tmp_path / "one.py"
    dag_file.write_text("from airflow.sdk import DAG\nwith DAG('only_this', schedule=None):\n    pass\n")
    bag = compat.dag_bag(str(dag_file), safe_mode=False)
    assert sorted(bag.dags) == ["only_this"] and not bag.import_errors
