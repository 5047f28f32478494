"""Regenerate docs/reliability.md: run the reliability tests (the deployed-Airflow scenarios,
the security checks, the bad-input catalogue) and render what the last run found.

    make reliability        # = .venv/bin/python tests/reliability_report.py

Each row is one test: its id, what it asserts (the test's docstring, or for the bad-input
catalogue the field and rule the message must name), the result and the duration. Exits with
pytest's status, so a failing check fails the command too, and with 1 when a check was skipped
(a missing package: `make reliability` installs them first, .ci/system-packages); the report is
written either way.
"""

from __future__ import annotations

import ast
import datetime as dt
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "reliability.md"

# (title, pytest targets, intro)
SECTIONS = [
    ("Scenarios: Airflow as deployed", ["tests/e2e/test_deployed.py"],
     "Each scenario on both executors, side by side. LocalExecutor: scheduler, dag-processor, "
     "triggerer and api-server as separate processes on PostgreSQL (tests/e2e/harness.py). "
     "CeleryExecutor: Redis broker, PostgreSQL metadata DB and result backend, two Celery workers "
     "(own process groups, working directories and host names), two schedulers, two triggerers, "
     "api-server, dag-processor (tests/e2e/celery_deployment.py). Against the emulator; assertions "
     "on the emulator's own records. — : the scenario is not run on that executor."),
    ("Infrastructure faults under load", ["tests/e2e/test_faults.py"],
     "50 deferred training tasks (a mapped task, tests/e2e/dags/e2e_faults.py) on each executor "
     "while a piece of the platform fails: the triggerers SIGKILLed under 20 % API faults, "
     "PostgreSQL restarted, Vertex unreachable, the Redis broker restarted (Celery), the task-log "
     "disk full. Each asserts on the emulator's records: one job per task try, every job ended, "
     "each task's training SUCCEEDED once, the DAG run's final state. A component that exits on "
     "a fault is started again, as a process supervisor would. — : not run on that executor."),
    ("Hedged races under faults", ["tests/e2e/test_races.py",
                                   "tests/test_races.py::test_a_worker_killed_between_two_creates_re_attaches_and_creates_only_the_missing_member",
                                   "tests/test_races.py::test_a_worker_killed_after_saving_a_key_but_before_its_name_finds_the_job_by_label",
                                   "tests/test_races.py::test_an_ambiguous_create_of_a_member_is_reconciled_by_its_key_and_the_retry_creates_only_the_rest",
                                   "tests/test_races.py::test_two_members_running_in_one_poll_keep_one_by_the_earlier_start_then_member_order"],
     "A `{\"race\": [...]}` step: exactly one winner, every other member cancelled, one job per "
     "submission key. Deployed (LocalExecutor on PostgreSQL): a triggerer restart mid-race, a race "
     "task marked failed or cleared while it defers. Through `dag.test()` against the emulator: a "
     "worker killed between two creates or between a key and its job name, an ambiguous create, "
     "two members RUNNING in one poll."),
    ("Security", ["tests/e2e/test_security.py",
                  "tests/test_cli.py::test_emulator_refuses_a_non_loopback_host_unless_asked",
                  "tests/test_cli.py::test_emulator_binds_a_non_loopback_host_when_told_explicitly",
                  "tests/test_cli.py::test_emulator_server_refuses_a_non_loopback_host_unless_asked",
                  "tests/test_emulator.py::test_the_emulator_issues_a_token_and_counts_requests_that_carry_it",
                  "tests/test_client_core.py::test_no_token_over_plain_http_to_a_remote_host",
                  "tests/test_client_core.py::test_a_fresh_token_is_registered_with_airflows_masker",
                  "tests/test_emulator_security.py", "tests/test_emulator_fuzz.py"],
     "A planted service-account key and bearer token, used for real over loopback TLS, grepped for "
     "in everything the run left; Airflow's masking of connection extras; the emulator's bind rule, "
     "its refusals (docs/security.md) and 100,000+ hostile requests of the fuzz suite. "
     "An `xfail` row is a known gap of Airflow itself, kept as a strict xfail so it shows when fixed."),
    ("Bad input", ["tests/test_bad_input.py"],
     "Each malformed input is rejected before any API call (the emulator's create count stays 0), "
     "with a message naming the field and the rule."),
]


def _docstrings(path: Path) -> dict[str, str]:
    """Test function name -> first paragraph of its docstring (read with ast: nothing imported)."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            doc = ast.get_docstring(node) or ""
            found[node.name] = " ".join(doc.split("\n\n")[0].split())
    return found


def _catalogue(path: Path) -> dict[str, str]:
    """Bad-input case id -> "field: rule words", from the CATALOGUE literal."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CATALOGUE" for t in node.targets):
            for case in node.value.elts:
                case_id, _, field, words = (getattr(e, "value", None) for e in case.elts)
                found[case_id] = f"rejected before any API call; the message names `{field}` and says “{words}”"
    return found


def _result(case: ET.Element) -> tuple[str, str]:
    for tag in ("failure", "error"):
        child = case.find(tag)
        if child is not None:
            # an assertion whose message is a log dump: show the compared values instead
            asserts = [line[1:].strip() for line in (child.text or "").splitlines()
                       if line.startswith("E ") and line[1:].strip().startswith("assert ")]
            why = asserts[-1] if asserts else (child.get("message") or "")
            return ("**FAIL**" if tag == "failure" else "**ERROR**"), why[:200]
    skipped = case.find("skipped")
    if skipped is not None:
        message = skipped.get("message") or ""
        if skipped.get("type") == "pytest.xfail":
            return "xfail (known gap)", message
        return "skipped", message
    return "pass", ""


def _selects(target: str, case: ET.Element) -> bool:
    """``tests/x.py`` selects all of its tests, ``tests/x.py::test_y`` that one (every parameter)."""
    file, _, function = target.partition("::")
    module = file.removesuffix(".py").replace("/", ".")
    return case.get("classname") == module and (not function or case.get("name", "").split("[")[0] == function)


def _row_description(name: str, docs: dict[str, str], catalogue: dict[str, str]) -> str:
    function, _, param = name.partition("[")
    param = param.rstrip("]")
    if param in catalogue:
        return catalogue[param]
    text = docs.get(function) or function.removeprefix("test_").replace("_", " ")
    return f"{text} (`{param}`)" if param else text


def run() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "junit.xml"
        targets = [t for _, section, _ in SECTIONS for t in section]
        started = dt.datetime.now(dt.timezone.utc)
        status = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEx",
                                  # xunit1: the junit file keeps each test's record_property figures
                                  "-o", "junit_family=xunit1", f"--junitxml={xml_path}", *targets], cwd=ROOT)
        cases = list(ET.parse(xml_path).getroot().iter("testcase")) if xml_path.exists() else []
    OUT.write_text(render(cases, started, status))
    print(f"wrote {OUT.relative_to(ROOT)} ({len(cases)} tests, pytest exit status {status})")
    return exit_status(cases, status)


def exit_status(cases: list[ET.Element], status: int) -> int:
    """pytest's status, or 1 when it passed with a check skipped: a check that did not run is not
    a passed one (e.g. no redis-server: every ``[celery]`` row skips)."""
    skipped = [c.get("name", "") for c in cases if _result(c)[0] == "skipped"]
    if skipped and status == 0:
        print(f"{len(skipped)} skipped, so not a reliability run: {', '.join(skipped[:5])}", file=sys.stderr)
        return 1
    return status


def render(cases: list[ET.Element], started: dt.datetime, status: int) -> str:
    results = [_result(c)[0] for c in cases]
    lines = [
        "# Reliability report",
        "",
        "<!-- generated by `make reliability` (tests/reliability_report.py): do not edit by hand -->",
        "",
        f"Last run: {started:%Y-%m-%d %H:%M} UTC · Airflow {version('apache-airflow')} · "
        f"Python {platform.python_version()} · {platform.system()} {platform.machine()}  ",
        f"Result: {results.count('pass')} passed, {sum(r.startswith('**') for r in results)} failed, "
        f"{results.count('xfail (known gap)')} known gaps (xfail), {results.count('skipped')} skipped "
        f"(pytest exit status {status}).",
        "",
        "Regenerate with `make reliability`.",
    ]
    for title, targets, intro in SECTIONS:
        files = {t.split("::")[0] for t in targets}
        docs, catalogue = {}, {}
        for file in files:
            docs.update(_docstrings(ROOT / file))
            catalogue.update(_catalogue(ROOT / file))
        picked = [c for c in cases if any(_selects(t, c) for t in targets)]
        if any(_executor_of(c) for c in picked):
            lines += ["", f"## {title}", "", intro, ""] + _side_by_side(picked, docs) + _figures(picked)
            continue
        lines += ["", f"## {title}", "", intro, "", "| test | what it asserts | result | time |",
                  "|---|---|---|---|"]
        for case in picked:
            result, why = _result(case)
            name = case.get("name", "")
            shown = f"{result}: {why}" if why and result != "pass" else result
            description = _row_description(name, docs, catalogue).replace("|", "\\|")
            lines.append(f"| `{name}` | {description} | {shown.replace('|', '/')} | {float(case.get('time', 0)):.1f} s |")
        if not picked:
            lines.append("| (not run) | | | |")
    return "\n".join(lines) + "\n"


EXECUTORS = ("local", "celery")


def _executor_of(case: ET.Element) -> str | None:
    """``test_x[celery]`` -> ``celery`` (the deployment fixture's parameter), else None."""
    param = case.get("name", "").partition("[")[2].rstrip("]")
    return param if param in EXECUTORS else None


def _side_by_side(cases: list[ET.Element], docs: dict[str, str]) -> list[str]:
    """One row per scenario: what it asserts, then result and time on each executor."""
    rows: dict[str, dict[str, ET.Element]] = {}
    for case in cases:
        rows.setdefault(case.get("name", "").split("[")[0], {})[_executor_of(case) or "local"] = case
    lines = ["| check | what it asserts | LocalExecutor | time | CeleryExecutor | time |",
             "|---|---|---|---|---|---|"]
    for function, by_executor in rows.items():
        cells = []
        for executor in EXECUTORS:
            case = by_executor.get(executor)
            if case is None:
                cells += ["—", ""]
                continue
            result, why = _result(case)
            shown = f"{result}: {why}" if why and result != "pass" else result
            cells += [shown.replace("|", "/"), f"{float(case.get('time', 0)):.1f} s"]
        description = (docs.get(function) or function.removeprefix("test_").replace("_", " ")).replace("|", "\\|")
        lines.append(f"| `{function}` | {description} | " + " | ".join(cells) + " |")
    return lines


def _figures(cases: list[ET.Element]) -> list[str]:
    """The figures a test recorded (pytest's record_property), e.g. the Celery scale run's."""
    lines = []
    for case in cases:
        props = [(p.get("name"), p.get("value")) for p in case.iter("property")]
        if props:
            lines += ["", f"Figures of `{case.get('name')}`:", "", "| figure | value |", "|---|---|"]
            lines += [f"| {name} | `{value}` |" for name, value in props]
    return lines


if __name__ == "__main__":
    sys.exit(run())
