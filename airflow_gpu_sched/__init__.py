"""airflow-gpu-sched: Vertex AI GPU training on scarce capacity from Airflow, in layers (README,
"What is here"): ``vertex`` (no Airflow), ``orchestration``, ``triggers`` and ``operators``,
``emulator``, ``tools``. Empty on purpose: importing a layer loads nothing of the others."""
