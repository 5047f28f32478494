"""`make docs`: the README, CHANGELOG and docs/ as a static site (mkdocs) with an API reference
from the docstrings (mkdocstrings, which reads the source without importing it), warnings as
errors (``mkdocs build --strict``: a broken link or a docstring it cannot read fails the build).

mkdocs serves only what is under its docs_dir, and the README sits at the top of the checkout
with links into docs/: the pages are staged into ``.docs-src/`` first, the README as the home
page with its ``docs/`` prefixes dropped, and a link to a file that is not a page (an example
DAG) pointing at the file in the repository.

Why mkdocs (with mkdocstrings) and not Sphinx, which Airflow's providers use: every page here is
Markdown already, read as is; Sphinx would need MyST and a conversion of the README's tables.
mkdocstrings reads the docstrings' Sphinx-style fields (``:param x:``) all the same.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / ".docs-src"
SOURCE = "https://github.com/airflow-gpu-sched/airflow-gpu-sched/blob/main/"  # pyproject's Source URL
LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)(#[^)\s]*)?\)")

API = """# API reference

From the docstrings of the public modules.

::: airflow_gpu_sched.operators
    options:
      members: [GpuTrainingOperator, FlexStartTrainingOperator, SpotTrainingOperator,
                PersistentResourceTrainingOperator]

::: airflow_gpu_sched.hooks.vertex_training
    options:
      members: [VertexTrainingHook]

::: airflow_gpu_sched.orchestration.errors

::: airflow_gpu_sched.orchestration.plans
"""


def _relink(text: str, page_dir: str) -> str:
    """Links as they resolve in the staged site: pages and images stay, other files go to the repository."""
    def fix(match: re.Match) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        path = (Path(page_dir) / target).as_posix() if page_dir else target
        path = re.sub(r"(^|/)[^/]+/\.\./", r"\1", path)  # docs/../README.md -> README.md
        if path == "README.md":
            return f"](index.md{anchor})"
        if path.startswith("docs/") and (ROOT / path).exists():
            return f"]({path.removeprefix('docs/')}{anchor})" if not page_dir else f"]({target}{anchor})"
        if path == "CHANGELOG.md":
            return f"](CHANGELOG.md{anchor})" if not page_dir else f"](CHANGELOG.md{anchor})"
        if (ROOT / path).exists():
            return f"]({SOURCE}{path}{anchor})"
        return match.group(0)  # left as is: mkdocs --strict reports it
    return LINK.sub(fix, text)


def stage() -> None:
    shutil.rmtree(STAGE, ignore_errors=True)
    STAGE.mkdir()
    (STAGE / "index.md").write_text(_relink((ROOT / "README.md").read_text(), ""))
    (STAGE / "CHANGELOG.md").write_text(_relink((ROOT / "CHANGELOG.md").read_text(), ""))
    for page in sorted((ROOT / "docs").glob("*.md")):
        (STAGE / page.name).write_text(_relink(page.read_text(), "docs"))
    shutil.copytree(ROOT / "docs" / "img", STAGE / "img")
    (STAGE / "api.md").write_text(API)


def main() -> int:
    stage()
    return subprocess.call([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                            "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
