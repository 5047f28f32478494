"""The compatibility matrix (docs/compatibility.md): a named slice of the suite, run in a venv of
another Airflow or Python than the main one (Airflow 3.3 / Python 3.11, where the whole suite runs).

    python tests/matrix.py slice [pytest args...]     # the slice, in the Python running this
    python tests/matrix.py venv AIRFLOW PYTHON DIR   # make DIR as the docs' install line does
    python tests/matrix.py list                      # the matrix, one line per cell
    python tests/matrix.py cell AIRFLOW PYTHON [pytest args...]   # one cell, one command: its venv
        # (.venv-afXY-pyZ, made if missing) then its slice on 2 workers, and the seconds each took

Each cell is one line of :data:`MATRIX`; adding Airflow 3.4 is one line there and one file,
``constraints/airflow-3.4.txt`` (a ``pip freeze`` of the venv that passed the slice).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (Airflow line, Python) -> the constraints file its venv installs with. 3.3 / 3.11 is the main
# venv (make bootstrap: constraints.txt, the whole suite); the others run the slice.
MATRIX = {
    ("3.1", "3.11"): "constraints/airflow-3.1.txt",
    ("3.2", "3.11"): "constraints/airflow-3.2.txt",
    ("3.3", "3.10"): "constraints/airflow-3.3-py3.10.txt",  # constraints.txt's pins of some need 3.11
    ("3.3", "3.12"): "constraints/airflow-3.3.txt",
    ("3.3", "3.13"): "constraints/airflow-3.3.txt",
    ("3.1", "3.12"): "constraints/airflow-3.1.txt",
    ("3.2", "3.12"): "constraints/airflow-3.2.txt",
    ("3.1", "3.13"): "constraints/airflow-3.1-py3.13.txt",  # + PyYAML-ft, libcst's on 3.13
}

# Unit and wire tests of what differs between Airflow lines (the names that moved, the ledger's
# store, re-attaching, triggers, the reaper, the CLI and the plugin), and `dags test` of every
# example DAG, the race included (test_operator_dags.py).
SLICE = [
    "tests/test_compat.py",
    "tests/test_layers.py",
    "tests/test_operators.py",
    "tests/test_operator_dags.py",
    "tests/test_operator_job_types.py",
    "tests/test_races.py",
    "tests/test_retries.py",
    "tests/test_resume_old_deferral.py",
    "tests/test_triggers.py",
    "tests/test_trigger_ownership.py",
    "tests/test_on_kill_cancel.py",
    "tests/test_reaper.py",
    "tests/test_plan_engine.py",
    "tests/test_outcomes.py",
    "tests/test_client_core.py",
    "tests/test_job_secrets.py",
    "tests/test_job_logs.py",
    "tests/test_observe_metrics.py",
    "tests/test_provider.py",
    "tests/test_cli_platform.py",
    "tests/test_ui.py",
]
NOT_DEPLOYED = ["-m", "not e2e and not reliability"]

# Tests of a guarantee an Airflow line does not give, deselected there, each with the degradation
# docs/compatibility.md states (what the user gets instead). Keys: the Airflow lines; values:
# test id prefixes -> why. Everything else in the slice must pass on every line.
_NO_STORE = ("a retry starts the plan over without a task_state_store: the attempt history, the plan's "
             "budgets and a race in flight are not carried to the next try (the live or succeeded job is, "
             "by its labels: tests/test_compat.py)")
_OLD = {
    "tests/test_retries.py::test_what_a_retry_does_after_each_way_a_training_task_ends": _NO_STORE,
    "tests/test_races.py::test_a_worker_killed_between_two_creates_re_attaches": _NO_STORE,
    "tests/test_races.py::test_a_worker_killed_after_saving_a_key_but_before_its_name": _NO_STORE,
    "tests/test_races.py::test_a_race_an_earlier_try_made_that_is_cancelled_after_this_try": _NO_STORE,
    "tests/test_observe_metrics.py::test_metrics_reach_statsd": "the test sets up 3.3's airflow.sdk.observability",
    "tests/test_races.py::test_race_members_reach_the_metrics": "the test sets up 3.3's airflow.sdk.observability",
    "tests/test_provider.py::test_with_the_google_provider_installed": (
        "the test's stand-in Google provider has no hook module, which 3.1/3.2's providers manager imports"),
}
DEGRADED = {
    "3.1": {**_OLD,
            "tests/test_cli_platform.py::test_the_airflow_cli_has_the_same_commands": "no provider CLI: airflow-gpu-sched",
            "tests/test_cli_platform.py::test_every_listing_under_airflow_defaults": "no provider CLI: airflow-gpu-sched",
            "tests/test_provider.py::test_the_providers_manager_lists_the_hook_connection_types_and_their_form": (
                "3.1 reads no conn-fields: the connection form has the standard fields, the rest is Extra JSON"),
            "tests/test_cli_platform.py::test_plan_check_of_a_dag_that_breaks_a_rule": (
                "3.1's packages print DeprecationWarnings on stderr, which these tests read exactly"),
            "tests/test_cli_platform.py::test_every_listing_format_and_the_deprecated": (
                "3.1's packages print DeprecationWarnings on stderr, which these tests read exactly"),
            "tests/test_cli_platform.py::test_an_api_error_is_exit_3": (
                "3.1's packages print DeprecationWarnings on stderr, which these tests read exactly")},
    "3.2": dict(_OLD),
}
# the same, per Python: what needs a package whose releases need Python 3.11 (NEEDS_311)
DEGRADED_PYTHON = {
    "3.10": {"tests/test_provider.py::test_vertex_ai_asset_uris_are_registered_and_normalized": (
        "its OpenLineage conversion needs the OpenLineage provider, whose releases need Python 3.11")},
}


# the test extra's packages whose releases need Python 3.11 (their tests are not in the slice)
NEEDS_311 = ("apache-airflow-providers-openlineage", "apache-airflow-providers-celery")


def install_line(constraints: str, python: str) -> list[str]:
    """What docs/compatibility.md tells users, with the test extra for the slice (on Python 3.10
    the extra's packages one by one, less those of :data:`NEEDS_311`)."""
    if python != "3.10":
        return ["-c", constraints, "-e", f"{REPO}[test]"]
    try:
        import tomllib
    except ImportError:  # Python 3.10: its backport, which pip and pytest bring
        import tomli as tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return ["-c", constraints, "-e", str(REPO), *(r for r in extra if not r.startswith(NEEDS_311))]


def cell(airflow: str, python: str, pytest_args: list[str]) -> int:
    """One cell with one command: its venv in the checkout (made if missing), then its slice on
    xdist's 2 workers, printing the seconds of each (what docs/compatibility.md reports)."""
    import time

    if (airflow, python) not in MATRIX:
        print(f"no cell Airflow {airflow} / Python {python} in MATRIX (tests/matrix.py list)", file=sys.stderr)
        return 2
    where = REPO / f".venv-af{airflow.replace('.', '')}-py{python.replace('.', '')}"
    started = time.monotonic()
    if not (where / "bin" / "python").exists():
        code = main(["venv", airflow, python, str(where)])
        print(f"matrix: venv {where.name} took {time.monotonic() - started:.0f} s", flush=True)
        if code:
            return code
    sliced = time.monotonic()
    code = subprocess.call([str(where / "bin" / "python"), __file__, "slice",
                            *(pytest_args or ["-q", "-n", "2", "--dist", "loadgroup"])], cwd=REPO)
    print(f"matrix: slice of Airflow {airflow} / Python {python} took {time.monotonic() - sliced:.0f} s "
          f"(exit {code})", flush=True)
    return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["slice"]:
        from importlib.metadata import version

        line = ".".join(version("apache-airflow-core").split(".")[:2])
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        tests = [*DEGRADED.get(line, {}), *DEGRADED_PYTHON.get(python, {})]
        deselect = [arg for test in tests for arg in ("--deselect", test)]
        return subprocess.call([sys.executable, "-m", "pytest", *NOT_DEPLOYED, *SLICE, *deselect, *argv[1:]],
                               cwd=REPO)
    if argv[:1] == ["list"]:
        for (airflow, python), constraints in MATRIX.items():
            print(f"Airflow {airflow}  Python {python}  {constraints}")
        return 0
    if argv[:1] == ["cell"] and len(argv) >= 3:
        return cell(argv[1], argv[2], argv[3:])
    if argv[:1] == ["venv"] and len(argv) == 4:
        airflow, python, where = argv[1:]
        constraints = str(REPO / MATRIX[(airflow, python)])
        pyenv = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() or "/root/.pyenv"
        interpreter = sorted(Path(pyenv, "versions").glob(f"{python}.*"))[-1] / "bin" / "python"
        subprocess.check_call([str(interpreter), "-m", "venv", where])
        pip = [f"{where}/bin/python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.check_call([*pip, "pip==24.3.1"])
        return subprocess.call([*pip, *install_line(constraints, python)])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
