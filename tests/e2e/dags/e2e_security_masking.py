"""e2e_security_masking: a task that logs the connection's extras in the ways a careless DAG
author might, each line tagged ``[form]`` so the test can check what Airflow's masker hid."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import structlog
from airflow.sdk import DAG, BaseHook, task

log = logging.getLogger(__name__)

with DAG(dag_id="e2e_security_masking", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["e2e"]):

    @task
    def show_connection() -> None:
        extras = BaseHook.get_connection("google_cloud_default").extra_dejson
        keyfile = extras["keyfile_dict"]  # a JSON string, as the Google provider stores it
        print("[print-keyfile_dict]", keyfile)
        log.info("[log-keyfile_dict] %s", keyfile)
        structlog.get_logger().info("[structured-extras]", extras=extras)
        print("[print-extras]", extras)
        log.info("[log-private_key] %s", json.loads(keyfile)["private_key"])

    show_connection()
