"""A stand-in for Google's OAuth token endpoint, and a check of the bearer tokens Vertex
requests carry, so tests can prove credentials were really used (the client only loads them
for an https endpoint: serve the emulator with TLS and point the key's ``token_uri`` here).

Counts go to the emulator's stats (``tokensIssued``, ``authorizedRequests``,
``unknownAuthorization``); a token's value is compared, never stored in stats or logged.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field


@dataclass
class TokenIssuer:
    access_token: str = field(default_factory=lambda: "emulator-" + secrets.token_urlsafe(24), repr=False)
    require_token: bool = False  # answer 401 to a Vertex request without the issued token
    reject_tokens: bool = False  # answer 401 to every Vertex request (a revoked key)

    def configure(self, body: dict) -> dict:
        if body.get("accessToken"):
            self.access_token = str(body["accessToken"])
        self.require_token = bool(body.get("requireToken", False))
        self.reject_tokens = bool(body.get("rejectTokens", False))
        return {"requireToken": self.require_token, "rejectTokens": self.reject_tokens}

    def token_response(self) -> dict:
        return {"access_token": self.access_token, "expires_in": 3600, "token_type": "Bearer"}

    def classify(self, authorization: str | None) -> str | None:
        """None (no header), "authorizedRequests" (the issued token) or "unknownAuthorization"."""
        if authorization is None:
            return None
        expected = f"Bearer {self.access_token}"
        return "authorizedRequests" if hmac.compare_digest(authorization, expected) else "unknownAuthorization"

    def refusal(self, kind: str | None) -> str | None:
        """Why a Vertex request is refused (401), or None."""
        if self.reject_tokens:
            return "Request had invalid authentication credentials (the emulator rejects every token)."
        if self.require_token and kind != "authorizedRequests":
            return "Request is missing required authentication credential. Expected OAuth 2 access token."
        return None
