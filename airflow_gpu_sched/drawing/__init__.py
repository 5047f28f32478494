"""Pictures drawn from plain data, without I/O: the training timeline (``timeline.py``: nights of
DAG runs, their tasks and attempts, laid out once and written as SVG). Its sources live with
their data: the emulator's job histories (``emulator/nights.py``), the tasks' XCom results (the
UI plugin, the command line), so this layer imports nothing of the package and sits under the
emulator, the UI plugin and the tools alike.

May import: nothing of this package; never airflow.
"""
