"""One address for the docs site (issue 41): ``airflow_gpu_sched.DOCS_URL`` is what the CLI's help
links to, pyproject's ``Documentation`` URL (Airflow's provider docs link) and mkdocs' ``site_url``;
the help says what each command does and names no path of a repository the user does not have."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from airflow_gpu_sched import DOCS_URL, docs_page
from airflow_gpu_sched.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
REPO_PATH = re.compile(r"\b(?:docs|dags_examples|airflow_gpu_sched|tests)/[\w./-]*")


def test_pyproject_mkdocs_and_the_package_give_one_docs_address():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nplugins:")[0])  # plugins: python tags
    assert urls["Documentation"] == DOCS_URL == site["site_url"]
    assert DOCS_URL.startswith("https://") and DOCS_URL.endswith("/")
    assert docs_page("cli") == DOCS_URL + "cli/" and (ROOT / "docs" / "cli.md").exists()


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


HELPS = [(), ("emulator",), ("demo",), ("timeline",), ("jobs",), ("jobs", "list"), ("jobs", "orphans"),
         ("plan",), ("plan", "check"), ("quota",), ("quota", "check")]


@pytest.mark.parametrize("argv", HELPS, ids=[" ".join(a) or "top" for a in HELPS])
def test_help_names_no_repository_path(capsys, argv):
    text = _help(capsys, *argv)
    assert not REPO_PATH.search(text), REPO_PATH.search(text).group(0)


def test_help_says_what_the_commands_do_and_where_the_docs_are(capsys):
    top = _help(capsys)
    assert f"documentation: {DOCS_URL}" in top and docs_page("cli") in top
    assert "run the seven example DAGs" in top  # not "the nightly_retraining example DAG": it runs seven
    assert "demo run the seven example DAGs (nightly, SPOT, persistent resource, tuned, deploy, race" in " ".join(
        top.split())
    assert "list the jobs this package submitted" in " ".join(_help(capsys, "jobs", "list").split())
