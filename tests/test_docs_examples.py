"""Every documented command and DAG runs, as written (issue 41: the README's own CLI example
exited 2 and nothing caught it).

The code blocks of README.md and docs/*.md that are shell commands of this package
(``airflow-gpu-sched ...``, ``airflow gpu-sched ...``, ``airflow dags test ...``) or DAGs (a
``python`` block with ``DAG(``) are extracted and run against the emulator with no flag added. A
block that cannot run here (real Vertex AI, ``pip install``, ``make``) says so just above its
fence, ``<!-- not-run: why -->``; any other shell block fails the first test, so a new example
is run or explicitly left out, never silently skipped.

How they run: a page's command blocks, in order, as one bash script (``set -e``: each command
must exit 0) in a directory whose ``dags/`` holds the pages' DAG blocks (a DAG block's first line
names its file, ``# dags/NAME.py``), with Airflow's DAGs folder there and its metadata DB the
harness's; the connection ``google_cloud_default`` points at the test's emulator unless the page
exports its own (the README starts its own emulator, on 8765, as written). DAG blocks also run
through ``dag.test()``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(?P<why>[^>]*?)\s*-->\s*\n$")
SHELLS = ("sh", "bash", "shell", "console")
OURS = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:airflow-gpu-sched\s|airflow gpu-sched\s|airflow dags test\s|"
                  r"export [A-Z_][A-Z0-9_]*=)")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    not_run: str | None  # the reason given above the fence, if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """The commands of a shell block: its ``$ `` lines when it shows output, else every line
        that is not a comment; a line ending in a backslash goes on."""
        lines = self.body.splitlines()
        if any(line.startswith("$ ") for line in lines):
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        joined, commands = "", []
        for line in lines:
            if not joined and (not line.strip() or line.lstrip().startswith("#")):
                continue
            joined += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                commands.append(joined.strip())
                joined = ""
        return commands

    @property
    def is_dag(self) -> bool:
        return self.lang == "python" and "DAG(" in self.body


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = text[:match.start()]
            marker = NOT_RUN.search(before[-300:])
            found.append(Block(page, before.count("\n") + 1, match.group(1), match.group(2),
                               marker.group("why") if marker else None))
    return found


def _runnable(block: Block) -> bool:
    return block.lang in SHELLS and all(OURS.match(command) for command in block.commands())


def test_every_command_block_runs_or_says_why_not():
    unmarked = [f"{b.where}: {b.commands()[:1]}" for b in blocks()
                if b.lang in SHELLS and b.not_run is None and not _runnable(b)]
    assert unmarked == [], ("shell blocks that are neither this package's commands nor marked "
                            "<!-- not-run: why --> above their fence:\n" + "\n".join(unmarked))
    assert all(b.not_run for b in blocks() if b.not_run is not None)  # a reason, not an empty marker
    runnable = [b for b in blocks() if b.not_run is None and (_runnable(b) or b.is_dag)]
    readme = [b for b in runnable if b.page.name == "README.md"]
    assert len(readme) >= 3, [b.where for b in readme]  # the first DAG, its two commands, jobs list


def _dag_files(directory: Path) -> list[Path]:
    written = []
    for block in blocks():
        if block.is_dag and block.not_run is None:
            name = re.match(r"#\s*(dags/\w+\.py)\n", block.body)
            assert name, f"{block.where}: a DAG block's first line names its file (# dags/NAME.py)"
            path = directory / name.group(1)
            path.parent.mkdir(exist_ok=True)
            path.write_text(block.body)
            written.append(path)
    return written


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


SCRIPT_PAGES = sorted({b.page for b in blocks() if b.not_run is None and _runnable(b)})


@pytest.mark.parametrize("page", SCRIPT_PAGES, ids=[p.name for p in SCRIPT_PAGES])
def test_the_commands_of_a_page_run_as_written(airflow_db, fast_emulator, tmp_path, page):
    _dag_files(tmp_path)
    script = "\n".join(command for b in blocks() if b.page == page and b.not_run is None and _runnable(b)
                       for command in b.commands())
    if "airflow-gpu-sched emulator" in script:  # the page starts its own, on the port it says
        assert _port_free(8765), "port 8765 is taken: the README's emulator cannot start there"
    connection = {"conn_type": "google_cloud_platform", "extra": {"project": "my-project",
                                                                  "api_endpoint": fast_emulator.url}}
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"), "PYTHONPATH": str(ROOT),
           "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(connection),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "commands.log"  # a file, not a pipe: the page's background emulator holds its output open
    with log.open("w") as sink:
        process = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + script], cwd=tmp_path, env=env,
                                   stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=600)  # a hang guard
        finally:
            try:
                os.killpg(process.pid, signal.SIGTERM)  # the page's own emulator, started with &
            except ProcessLookupError:
                pass
            if process.poll() is None:
                process.kill()
                process.wait()
    out = log.read_text()
    assert process.returncode == 0, f"{page.name}:\n{script}\n---\n{out[-5000:]}"
    assert not re.search(r"\[error\s*\]|Traceback", out), out[-5000:]


DAG_BLOCKS = [b for b in blocks() if b.is_dag and b.not_run is None]


@pytest.mark.parametrize("block", DAG_BLOCKS, ids=[b.where for b in DAG_BLOCKS])
def test_a_documented_dag_runs_green_with_dag_test(airflow_db, fast_emulator, block, tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    from tests.airflow_harness import run_dag

    path = tmp_path / "dag.py"
    path.write_text(block.body)
    bag = DagBag(dag_folder=str(path), safe_mode=False)  # as Airflow reads the file
    assert not bag.import_errors, bag.import_errors
    [dag] = bag.dags.values()
    result = run_dag(dag)
    assert result.state == "success", {key: task.state for key, task in result.tasks.items()}
