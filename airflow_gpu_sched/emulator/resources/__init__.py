"""The emulator's resources, one module each (as moto keeps one model module per service):
custom jobs (``custom_jobs`` for the API, ``runs`` for their life cycle, ``holds`` for the
capacity, quota and reservation VMs they hold), tuning jobs, training pipelines, models,
persistent resources, operations and Cloud Quotas' quota infos. They share one :class:`Store`
(``store.py``: scenario, clock, ids, stats, the event queue and the custom job records);
``emulator/backend.py`` builds them and wires who tells whom.

May import: vertex, emulator; never airflow.
"""
