"""The Vertex AI picture, usable in any Python program without Airflow: the v1 resources as
pydantic models (models.py, job_type_models.py; their closed sets in enums.py, scalars in
wire_scalars.py), the rules a job must follow (rules.py, persistent_rules.py, job_type_rules.py,
catalog.py), and the REST clients (client/; its auth reads an Airflow connection only inside
``from_connection``).

May import: nothing of this package; never airflow.
"""
