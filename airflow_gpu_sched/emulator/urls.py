"""The Vertex AI methods the emulator serves, as a table: (HTTP method, path regex, rpc name).

The shape of moto's ``urls.py``: this table names each method; :mod:`responses` answers each
rpc name from the backend. Google-style paths (``{name}:cancel``) are matched with regular
expressions rather than FastAPI path templates, which cannot split ``:verb``.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import re

_SEG = r"[^/:]+"
_PARENT = rf"projects/(?P<project>{_SEG})/locations/(?P<location>{_SEG})"

# (HTTP method, path regex, rpc name). Order matters only where patterns overlap.
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(rf"^{p}$"), rpc) for m, p, rpc in [
        ("POST", rf"{_PARENT}/customJobs", "customJobs.create"),
        ("GET", rf"{_PARENT}/customJobs", "customJobs.list"),
        ("GET", rf"(?P<name>{_PARENT}/customJobs/{_SEG})", "customJobs.get"),
        ("POST", rf"(?P<name>{_PARENT}/customJobs/{_SEG}):cancel", "customJobs.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/customJobs/{_SEG})", "customJobs.delete"),
        ("POST", rf"{_PARENT}/persistentResources", "persistentResources.create"),
        ("GET", rf"{_PARENT}/persistentResources", "persistentResources.list"),
        ("GET", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.get"),
        ("DELETE", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.delete"),
        ("PATCH", rf"(?P<name>{_PARENT}/persistentResources/{_SEG})", "persistentResources.patch"),
        ("GET", rf"(?P<name>{_PARENT}/operations/{_SEG})", "operations.get"),
        ("GET", rf"(?P<name>{_PARENT}/persistentResources/{_SEG}/operations/{_SEG})",
         "persistentResources.operations.get"),
        ("POST", rf"{_PARENT}/hyperparameterTuningJobs", "hyperparameterTuningJobs.create"),
        ("GET", rf"{_PARENT}/hyperparameterTuningJobs", "hyperparameterTuningJobs.list"),
        ("GET", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG})", "hyperparameterTuningJobs.get"),
        ("POST", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG}):cancel", "hyperparameterTuningJobs.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/hyperparameterTuningJobs/{_SEG})", "hyperparameterTuningJobs.delete"),
        ("POST", rf"{_PARENT}/trainingPipelines", "trainingPipelines.create"),
        ("GET", rf"{_PARENT}/trainingPipelines", "trainingPipelines.list"),
        ("GET", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG})", "trainingPipelines.get"),
        ("POST", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG}):cancel", "trainingPipelines.cancel"),
        ("DELETE", rf"(?P<name>{_PARENT}/trainingPipelines/{_SEG})", "trainingPipelines.delete"),
        ("GET", rf"{_PARENT}/models", "models.list"),
        ("GET", rf"(?P<name>{_PARENT}/models/{_SEG})", "models.get"),
        # Cloud Quotas API v1 (cloudquotas.googleapis.com), served on the same host
        ("GET", rf"projects/(?P<project>{_SEG})/locations/global/services/(?P<service>{_SEG})/quotaInfos",
         "quotaInfos.list"),
        ("GET", rf"projects/(?P<project>{_SEG})/locations/global/services/(?P<service>{_SEG})/quotaInfos/"
                rf"(?P<quota_id>{_SEG})", "quotaInfos.get"),
    ]
]


def match_route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    for route_method, pattern, rpc in ROUTES:
        if route_method == method:
            found = pattern.match(path)
            if found:
                return rpc, found.groupdict()
    return None
