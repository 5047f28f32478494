"""The package as users get it: a wheel built from this checkout, installed into a fresh venv,
runs ``airflow-gpu-sched demo --strategies`` and ships its example DAGs, py.typed and LICENSE.

Fastest correct way (offline-safe once pip's cache holds setuptools): ``pip wheel --no-deps``
builds the wheel; ``python -m venv --without-pip`` makes the venv (no pip bootstrap); a ``.pth``
line puts the project's venv site-packages (Airflow and the other dependencies) after the new
venv's own; ``pip --python <venv> install --no-deps`` installs only the wheel. The ``.pth`` is a
plain path, so the project venv's editable-install hook (its own ``.pth``) is not processed:
``airflow_gpu_sched`` can only come from the wheel, which the test checks. Runs from a
directory outside the checkout, with no PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(600)


def _matrix():
    import importlib.util

    spec = importlib.util.spec_from_file_location("matrix", ROOT / "tests" / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "dist"
    # from a copy: setuptools builds in the source tree and leaves airflow_gpu_sched.egg-info/ and
    # build/ there (git-ignored, so they outlive the run). That egg-info on a PYTHONPATH is a second
    # airflow-gpu-sched distribution: Airflow then loads the plugin twice, and the Task SDK's plugins
    # manager (1.3.2) stops at the duplicate, dropping the plugins after it -- the OpenLineage
    # listener's task events went missing in test_observe_lineage (apache/airflow#72253).
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "dist", "site", "*.egg-info",
                                                                 "__pycache__"))
    before = sorted(p.name for p in ROOT.iterdir())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
                   cwd=tmp, check=True, capture_output=True)
    assert sorted(p.name for p in ROOT.iterdir()) == before  # the build wrote nothing into the checkout
    wheel = next(wheels.glob("airflow_gpu_sched-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "AIRFLOW"))}
    # without PYTHONPATH here too: a checkout on it (with the egg-info a build leaves) would look
    # like the package already installed, and pip would skip the wheel
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                    str(wheel)], check=True, capture_output=True, env=env)
    env.update(AIRFLOW_HOME=str(tmp / "airflow_home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return wheel, venv, env


def test_the_wheel_carries_the_markers_the_license_and_the_examples(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_gpu_sched/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert {"airflow_gpu_sched/examples/nightly_retraining.py", "airflow_gpu_sched/examples/training/train.py",
            "airflow_gpu_sched/vertex/data/request_schema.json"} <= set(names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Classifier: Framework :: Apache Airflow :: Provider" in metadata
    lines = metadata.splitlines()
    from airflow_gpu_sched import __version__

    assert f"Version: {__version__}" in lines  # the one version, read from airflow_gpu_sched/__init__.py
    # PEP 639: an SPDX expression and the license file, no legacy License field or classifier
    assert "License-Expression: Apache-2.0" in lines and "License-File: LICENSE" in lines
    assert not any(line.startswith(("License:", "Classifier: License ::")) for line in lines)
    urls = {line.split(": ", 1)[1].split(",")[0] for line in lines if line.startswith("Project-URL: ")}
    assert {"Documentation", "Source", "Changelog"} <= urls
    # exactly the Python versions tested: the one the whole suite runs on, and the matrix's
    # (tests/matrix.py: each cell's slice was run, docs/compatibility.md gives when and the result)
    pythons = {line.rsplit(" :: ", 1)[1] for line in lines if line.startswith("Classifier: Programming Language :: Python :: 3.")}
    assert pythons == {f"{sys.version_info.major}.{sys.version_info.minor}"} | {py for _, py in _matrix().MATRIX}
    tested = sorted(pythons, key=lambda v: tuple(map(int, v.split("."))))
    low, high = tested[0], tested[-1].split(".")
    assert f"Requires-Python: <{high[0]}.{int(high[1]) + 1},>={low}" in lines  # no untried Python either
    assert "Provides-Extra: google" in lines
    assert any(line.startswith("Requires-Dist: apache-airflow-providers-google") and 'extra == "google"' in line
               for line in lines)
    assert not any(line.startswith("Requires-Dist: apache-airflow-providers-google") and "extra ==" not in line
                   for line in lines)  # not a runtime dependency


def test_demo_strategies_runs_from_the_installed_wheel(installed, tmp_path):
    _, venv, env = installed
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import airflow_gpu_sched; print(airflow_gpu_sched.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout
    # at 600x, as tests/test_cli.py runs it: the installed copy is what is checked, not the speed (22 s -> 6 s)
    run = subprocess.run([str(venv / "bin" / "airflow-gpu-sched"), "demo", "--strategies", "--speed", "600"],
                         cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "All three jobs succeeded." in run.stdout
    for job in ("flex-start", "spot", "persistent"):
        assert any(line.split()[:2] == [job, "SUCCEEDED"] for line in run.stdout.splitlines()), run.stdout


def test_the_example_dags_parse_from_the_installed_wheel(installed, tmp_path):
    _, venv, env = installed
    # as a user (and the demo) runs them: the DAGs folder set to the packaged examples
    probe = ("import os\n"
             "from airflow_gpu_sched.tools.demo import examples_dir\n"
             "d = examples_dir(); os.environ['AIRFLOW__CORE__DAGS_FOLDER'] = str(d)\n"
             "from airflow.dag_processing.dagbag import BundleDagBag\n"  # what `airflow dags test` parses with
             "bag = BundleDagBag(dag_folder=str(d), bundle_path=d)\n"
             "print(d); print(sorted(bag.dag_ids)); print(bag.import_errors)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    folder, dag_ids, errors = out.stdout.strip().splitlines()[-3:]
    assert folder.startswith(str(venv))
    assert "nightly_retraining" in dag_ids and "spot_training" in dag_ids and errors == "{}"


def test_airflow_finds_the_ui_plugin_of_the_installed_wheel_by_its_entry_point(installed, tmp_path):
    """The ``airflow.plugins`` entry point, as Airflow's plugins manager reads it (``airflow plugins``)."""
    import json

    _, venv, env = installed
    run = subprocess.run([str(venv / "bin" / "python"), "-m", "airflow", "plugins", "--output", "json"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    plugins = json.loads(run.stdout[run.stdout.index("["):])
    mine = next(p for p in plugins if p["name"] == "airflow_gpu_sched")
    assert mine["source"].startswith("airflow-gpu-sched==") or "airflow_gpu_sched" in mine["source"], mine
    assert "/gpu-sched" in str(mine["fastapi_apps"]) and "dag_run" in str(mine["external_views"])


def test_the_cli_of_the_installed_wheel_shows_its_version_and_lists_as_yaml(installed, tmp_path):
    """Done when of issue 25: ``--version``, ``jobs list -o yaml`` and ``airflow gpu-sched plan check
    ... -o json`` from the wheel in a fresh virtualenv."""
    import json

    import yaml

    from airflow_gpu_sched import __version__
    from airflow_gpu_sched.emulator import EmulatorServer

    _, venv, env = installed
    script = str(venv / "bin" / "airflow-gpu-sched")
    version = subprocess.run([script, "--version"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
    assert version.returncode == 0 and version.stdout.strip() == f"airflow-gpu-sched {__version__}"
    with EmulatorServer() as server:
        listed = subprocess.run([script, "jobs", "list", "--project", "p", "--location", "us-central1",
                                 "--api-endpoint", server.url, "-o", "yaml"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert yaml.safe_load(listed.stdout) == []
    dag = tmp_path / "planned.py"
    dag.write_text(
        "from datetime import datetime\nfrom airflow.sdk import DAG\n"
        "from airflow_gpu_sched.operators import GpuTrainingOperator\n"
        "with DAG('wheel_planned', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    GpuTrainingOperator(task_id='train', project_id='p', location='us-central1', image_uri='gcr.io/p/t:1',\n"
        "        machine_type='a2-highgpu-1g', accelerator_type='NVIDIA_TESLA_A100', accelerator_count=1,\n"
        "        plan=[{'strategy': 'FLEX_START', 'max_wait_duration': '2h'}, {'strategy': 'SPOT'}])\n")
    checked = subprocess.run([str(venv / "bin" / "python"), "-m", "airflow", "gpu-sched", "plan", "check", str(dag),
                              "-o", "json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr[-2000:]
    rows = json.loads(checked.stdout[checked.stdout.index("["):])
    assert [r["step"].split("(")[0] for r in rows] == ["FLEX_START", "SPOT"]


@pytest.mark.reliability
def test_the_cli_from_the_wheel_with_its_dependencies_in_a_fresh_venv(installed, tmp_path):
    """Done when of issue 25, as a user installs: a venv with its own pip, the wheel and its
    dependencies from the package index (or pip's cache) under ``constraints.txt``; nothing of the
    project's venv. Slow (about a minute with a warm pip cache) and needs the index: ``reliability``."""
    import json

    import yaml

    from airflow_gpu_sched import __version__
    from airflow_gpu_sched.emulator import EmulatorServer

    wheel, _, env = installed
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel),
                              "-c", str(ROOT / "constraints.txt")], env=env, capture_output=True, text=True,
                             timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {**env, "AIRFLOW_HOME": str(tmp_path / "home")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import airflow, airflow_gpu_sched as p; "
                            "print(p.__file__); print(airflow.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where  # the package and Airflow: the fresh venv's
    script = str(venv / "bin" / "airflow-gpu-sched")
    version = subprocess.run([script, "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert version.stdout.strip() == f"airflow-gpu-sched {__version__}", version.stderr[-2000:]
    with EmulatorServer() as server:
        listed = subprocess.run([script, "jobs", "list", "--project", "p", "--location", "us-central1",
                                 "--api-endpoint", server.url, "-o", "yaml"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and yaml.safe_load(listed.stdout) == [], listed.stderr[-2000:]
    dag = tmp_path / "planned.py"
    dag.write_text(
        "from datetime import datetime\nfrom airflow.sdk import DAG\n"
        "from airflow_gpu_sched.operators import GpuTrainingOperator\n"
        "with DAG('fresh_planned', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    GpuTrainingOperator(task_id='train', project_id='p', location='us-central1', image_uri='gcr.io/p/t:1',\n"
        "        machine_type='a2-highgpu-1g', accelerator_type='NVIDIA_TESLA_A100', accelerator_count=1,\n"
        "        plan=[{'strategy': 'FLEX_START', 'max_wait_duration': '2h'}, {'strategy': 'SPOT'}])\n")
    checked = subprocess.run([str(venv / "bin" / "airflow"), "gpu-sched", "plan", "check", str(dag), "-o", "json"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr[-2000:]
    rows = json.loads(checked.stdout[checked.stdout.index("["):])
    assert [r["step"].split("(")[0] for r in rows] == ["FLEX_START", "SPOT"]
