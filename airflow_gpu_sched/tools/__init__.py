"""The tools: the ``airflow-gpu-sched`` command line (cli.py) and the demos it runs (demo.py;
the nightly one runs Airflow in a subprocess, it does not import it).

May import: nothing of this package; never airflow.
"""
