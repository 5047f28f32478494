"""Airflow hooks: :class:`~airflow_gpu_sched.hooks.vertex_training.VertexTrainingHook` hands out the
Vertex AI clients for a connection inside ``@task`` functions; connection_form.py declares the
connection types and their form for ``get_provider_info``. Empty on purpose: the provider's entry
point reads the form without importing the hook.

May import: hooks; never airflow.
"""
