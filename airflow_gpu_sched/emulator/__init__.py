"""A local Vertex AI (custom jobs, persistent resources, operations) with simulated GPU capacity.

See ``docs/emulator.md`` for the life cycles, the error codes it chose, the scenario file and
the control API. ``EmulatorServer`` runs it in-process; ``airflow-gpu-sched emulator`` from
the command line.

May import: emulator; never airflow.
"""

from airflow_gpu_sched.emulator.scenario import Scenario
from airflow_gpu_sched.emulator.server import EmulatorServer

__all__ = ["EmulatorServer", "Scenario"]
