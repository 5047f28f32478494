"""`make docs` builds: README, CHANGELOG and docs/ as a site with the API reference, under
mkdocs --strict (a broken link or an unreadable docstring fails). make test installs the docs
extra for it; skipped only where pytest runs without that extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_strictly_with_the_api_reference():
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    run = subprocess.run([sys.executable, str(ROOT / "docs" / "build_site.py")], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    api = (ROOT / "site" / "api" / "index.html").read_text()
    assert "VertexTrainingHook" in api and "get_credentials" in api and "GpuTrainingOperator" in api
    home = (ROOT / "site" / "index.html").read_text()
    assert 'href="operators/' in home and 'href="CHANGELOG/' in home  # README's docs/ links, relinked
