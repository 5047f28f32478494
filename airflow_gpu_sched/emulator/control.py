"""A small client of the emulator's control API (not part of Vertex), for tests and demos.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

from typing import Any

import requests


class EmulatorControl:
    def __init__(self, url: str, timeout: float = 10.0, control_token: str | None = None):
        """``control_token``: the one an emulator started with ``--control-token`` printed."""
        self.url = url.rstrip("/")
        self._session = requests.Session()
        if control_token:
            self._session.headers["X-Emulator-Control-Token"] = control_token  # emulator/guard.py
        self._timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        response = self._session.request(method, f"{self.url}/emulator/v1/{path}", json=body,
                                         timeout=self._timeout)
        if response.status_code >= 400:
            raise RuntimeError(f"emulator control {path}: {response.status_code} {response.text}")
        return response.json()

    def reset(self, scenario: dict | None = None) -> None:
        self._call("POST", "reset", scenario or {})

    def set_capacity(self, location: str, accelerator_type: str, *, standard: int | None = None,
                     spot: int | None = None, flex_start: int | None = None,
                     at_seconds: float | None = None, standard_stockout_seconds: float | None = None) -> dict:
        """GPUs per tier (None: unchanged); ``standard_stockout_seconds``: a STANDARD job waiting
        that long for capacity here fails "Resources are insufficient in region: ..."."""
        body = {"location": location, "acceleratorType": accelerator_type, "standard": standard,
                "spot": spot, "flexStart": flex_start, "atSeconds": at_seconds,
                "standardStockoutSeconds": standard_stockout_seconds}
        return self._call("POST", "capacity", {k: v for k, v in body.items() if v is not None})

    def set_quota(self, location: str, accelerator_type: str, *, standard: int | None = None,
                  preemptible: int | None = None) -> dict:
        body = {"location": location, "acceleratorType": accelerator_type, "standard": standard,
                "preemptible": preemptible}
        return self._call("POST", "quota", {k: v for k, v in body.items() if v is not None})

    def set_quota_limit(self, metric: str, limit: int, region: str | None = None) -> dict:
        """A Cloud Quotas limit (``custom_model_training_preemptible_nvidia_h100_gpus``, with or
        without ``aiplatform.googleapis.com/``); ``region=None``: the default for every region.
        The same store the create-time quota check and :meth:`set_quota` use."""
        return self._call("POST", "quotas", {"metric": metric, "region": region, "limit": limit})

    def deny_quota_reads(self, deny: bool = True) -> dict:
        """Make the Cloud Quotas API answer 403 PERMISSION_DENIED (``False`` restores it)."""
        return self._call("POST", "quotas", {"deny": deny})

    def quotas(self) -> dict:
        """``{"quotas": [{"metric", "region", "limit"}], "deny": bool}``: every limit set."""
        return self._call("GET", "quotas")

    def set_faults(self, error_rate: float = 0.0, status_codes: list[int] | None = None,
                   latency_seconds: float = 0.0, after_handler_rate: float = 0.0) -> dict:
        """Inject errors; ``after_handler_rate``: share of them that hit after the request was
        carried out (a lost response: e.g. a create that made its job but answered 503)."""
        return self._call("POST", "faults", {"errorRate": error_rate, "statusCodes": status_codes or [429, 503],
                                             "latencySeconds": latency_seconds,
                                             "afterHandlerRate": after_handler_rate})

    def clear_faults(self) -> dict:
        return self._call("POST", "faults", {})

    def preempt(self, job_name: str) -> dict:
        return self._call("POST", f"{job_name}:preempt", {})

    def set_resource_state(self, resource_name: str, state: str, message: str | None = None) -> dict:
        return self._call("POST", f"{resource_name}:setState", {"state": state, "message": message})

    def history(self, job_name: str) -> dict:
        """A custom job's, tuning job's (with its trials' custom jobs) or pipeline's (with its
        ``backingCustomJob``) state changes."""
        return self._call("GET", f"{job_name}:history")

    def set_auth(self, access_token: str | None = None, require_token: bool = False,
                 reject_tokens: bool = False, *, impersonated_token: str | None = None,
                 federated_token: str | None = None, subject_token: str | None = None,
                 secrets: dict[str, str] | None = None) -> dict:
        """The token ``POST /token`` hands out; 401 for Vertex requests without an issued one
        (``require_token``) or for every one (``reject_tokens``). Also the token IAM Credentials'
        generateAccessToken hands out (``impersonated_token``), the one STS exchanges
        ``subject_token`` for (``federated_token``), and Secret Manager's secrets
        (``{"projects/P/secrets/S": payload}``). Clears the records of :meth:`auth_records`."""
        return self._call("POST", "auth", {"accessToken": access_token, "requireToken": require_token,
                                           "rejectTokens": reject_tokens, "impersonatedToken": impersonated_token,
                                           "federatedToken": federated_token, "subjectToken": subject_token,
                                           "secrets": secrets or {}})

    def auth_records(self) -> dict:
        """What the token stand-ins were asked: ``impersonations`` (target, delegates, scope,
        caller's token kind), ``exchanges`` (STS audience, subject token type, whether the subject
        token matched), ``secretAccesses`` (name, version, caller); never a token or a secret."""
        return self._call("GET", "auth")

    def stats(self) -> dict:
        return self._call("GET", "stats")

    def start_traffic(self) -> None:
        """Record every Vertex exchange from now on (clears an earlier record; a reset stops it)."""
        self._call("POST", "traffic:start", {})

    def traffic(self) -> list[dict]:
        """The exchanges recorded since :meth:`start_traffic`: ``{rpc, method, path, query,
        requestBody, status, responseBody}``, bodies as the text on the wire."""
        return self._call("GET", "traffic")["exchanges"]

    def advance(self, seconds: float) -> str:
        """Move emulated time forward; returns the new emulated now."""
        return self._call("POST", "clock:advance", {"seconds": seconds})["now"]
