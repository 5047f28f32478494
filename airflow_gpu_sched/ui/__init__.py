"""The Airflow UI plugin: the night at a glance, every training task's attempts as a timeline,
read from the tasks' XCom results through Airflow's REST API as the signed-in user.

``plugin.py`` (what Airflow loads: cheap, builds the web app on its first request), ``app.py``
(the FastAPI routes), ``source.py`` (the REST API calls, I/O), ``page.py`` (HTML from nights, pure).

May import: vertex, ui; airflow.
"""

PREFIX = "/gpu-sched"  # where the api-server mounts the plugin's app
