"""airflow-gpu-sched: Vertex AI GPU training on scarce capacity from Airflow, in layers
(docs/architecture.md): ``vertex`` (no Airflow), ``orchestration``, ``triggers`` and ``operators``,
``emulator``, ``tools``. Empty on purpose but for the version: importing a layer loads nothing
of the others."""

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic ``attr``,
# without importing), ``airflow-gpu-sched --version`` and the provider info show it.
__version__ = "0.2.0"
