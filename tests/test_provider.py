"""Provider registration and DAG-parse cost of the operators module."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points


def test_the_package_registers_as_an_airflow_provider(airflow_db):
    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_gpu_sched")]
    info = ep.load()()
    assert info["package-name"] == "airflow-gpu-sched"
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-gpu-sched" in manager.providers
    assert "airflow_gpu_sched.operators.base.VertexCustomJobLink" in manager.extra_links_class_names


def test_importing_the_operators_does_not_import_the_clients():
    code = ("import sys, airflow_gpu_sched.operators; "
            "print(sorted(m for m in ('requests', 'google.auth', 'airflow_gpu_sched.vertex.client') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
