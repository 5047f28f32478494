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
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                   cwd=tmp, check=True, capture_output=True)
    wheel = next(wheels.glob("airflow_gpu_sched-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                    str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "AIRFLOW"))}
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
    assert "Project-URL:" in metadata


def test_demo_strategies_runs_from_the_installed_wheel(installed, tmp_path):
    _, venv, env = installed
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import airflow_gpu_sched; print(airflow_gpu_sched.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout
    run = subprocess.run([str(venv / "bin" / "airflow-gpu-sched"), "demo", "--strategies"], cwd=tmp_path, env=env,
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
