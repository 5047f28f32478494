"""airflow-gpu-sched: Vertex AI GPU training on scarce capacity from Airflow, in layers
(docs/architecture.md): ``vertex`` (no Airflow), ``orchestration``, ``triggers`` and ``operators``,
``emulator``, ``tools``. Empty on purpose but for the version and the docs address: importing a layer loads nothing
of the others."""

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic ``attr``,
# without importing), ``airflow-gpu-sched --version`` and the provider info show it.
__version__ = "0.2.0"

# The one placeholder for the documentation site's address (mkdocs' site_url; each page is
# DOCS_URL + "<page>/"): the CLI's help and messages link into it, pyproject's Documentation URL
# and mkdocs.yml's site_url repeat it (tests/test_docs_url.py keeps the three equal). Change it
# here and there when the site is published elsewhere.
DOCS_URL = "https://airflow-gpu-sched.github.io/airflow-gpu-sched/"


def docs_page(page: str, anchor: str = "") -> str:
    """The published address of a docs/ page, e.g. ``docs_page("cli")``."""
    return f"{DOCS_URL}{page}/" + (f"#{anchor}" if anchor else "")
