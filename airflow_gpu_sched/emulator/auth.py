"""Stand-ins for Google's token services, and a check of the bearer tokens Vertex requests
carry, so tests can prove which credentials were really used (the client only loads them for
an https endpoint: serve the emulator with TLS and point the key's ``token_uri`` here).

- ``POST /token``: the OAuth token endpoint of a service-account key (its one source token).
- ``POST /v1/projects/-/serviceAccounts/{sa}:generateAccessToken``: IAM Credentials; hands out
  the impersonated token when called with an issued token, records target and delegate chain.
- ``POST /v1/token``: the Security Token Service exchange of workload identity federation;
  hands out the federated token for the planted subject token.
- ``GET /v1/projects/{p}/secrets/{s}/versions/{v}:access``: Secret Manager, for the secrets
  planted through the control API.

Counts go to the emulator's stats (``tokensIssued``, ``authorizedRequests`` (the source token),
``impersonatedRequests``, ``federatedRequests``, ``unknownAuthorization``); a token's value is
compared, never stored in stats or logged. Records (``GET /emulator/v1/auth``) say what was
asked (chains, audiences, secret names, the key that asked ``/token``), never a token or a secret.

May import: nothing of this package; never airflow.
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
SUBJECT_TOKEN_TYPES = {  # STS: the types of external credential it exchanges
    "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token",
    "urn:ietf:params:oauth:token-type:saml2", "urn:ietf:params:aws:token-type:aws4_request",
    ACCESS_TOKEN_TYPE}
# IAM Credentials: delegates (and the name) are projects/-/serviceAccounts/{EMAIL_OR_UNIQUEID}
_ACCOUNT = re.compile(r"projects/-/serviceAccounts/[^/]+")
_SECRET_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
KINDS = ("authorizedRequests", "impersonatedRequests", "federatedRequests")


def _new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24)


class StandInError(Exception):
    """A refused token-service call: a Google status (IAM, Secret Manager) or an OAuth error code (STS)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class TokenIssuer:
    access_token: str = field(default_factory=lambda: _new("emulator-"), repr=False)
    impersonated_token: str = field(default_factory=lambda: _new("emulator-impersonated-"), repr=False)
    federated_token: str = field(default_factory=lambda: _new("emulator-federated-"), repr=False)
    subject_token: str | None = field(default=None, repr=False)  # the one STS accepts; None: any
    require_token: bool = False  # answer 401 to a Vertex request without an issued token
    reject_tokens: bool = False  # answer 401 to every Vertex request (a revoked key)
    secrets: dict[str, bytes] = field(default_factory=dict, repr=False)  # "projects/p/secrets/s" -> payload
    impersonations: list[dict] = field(default_factory=list)
    exchanges: list[dict] = field(default_factory=list)
    secret_accesses: list[dict] = field(default_factory=list)
    grants: list[dict] = field(default_factory=list)

    def configure(self, body: dict) -> dict:
        bad = [key for key in ("accessToken", "impersonatedToken", "federatedToken", "subjectToken")
               if body.get(key) is not None and not (isinstance(body[key], str) and body[key].isascii()
                                                     and body[key].isprintable())]
        bad += [key for key in ("requireToken", "rejectTokens") if not isinstance(body.get(key, False), bool)]
        secrets_ = body.get("secrets") or {}
        if not isinstance(secrets_, dict) or not all(isinstance(v, str) for v in secrets_.values()):
            bad.append("secrets")
        if bad:  # checked before any change: a refused request leaves the settings as they were
            raise ValueError(f"auth: {', '.join(bad)}: tokens are printable ASCII strings, requireToken and "
                             "rejectTokens booleans, secrets an object of strings")
        for key, attr in (("accessToken", "access_token"), ("impersonatedToken", "impersonated_token"),
                          ("federatedToken", "federated_token")):
            if body.get(key):
                setattr(self, attr, str(body[key]))
        self.subject_token = str(body["subjectToken"]) if body.get("subjectToken") else None
        self.require_token = bool(body.get("requireToken", False))
        self.reject_tokens = bool(body.get("rejectTokens", False))
        self.secrets = {name: str(value).encode() for name, value in secrets_.items()}
        self.impersonations, self.exchanges, self.secret_accesses, self.grants = [], [], [], []
        return {"requireToken": self.require_token, "rejectTokens": self.reject_tokens,
                "secrets": sorted(self.secrets)}

    def records(self) -> dict:
        return {"impersonations": self.impersonations, "exchanges": self.exchanges,
                "secretAccesses": self.secret_accesses, "grants": self.grants}

    def record_grant(self, grant_type: str | None, issuer: Any) -> None:
        """Who asked ``/token``: the ``iss`` of a JWT-bearer assertion (a service account's email,
        read by the caller through the emulator's JSON limits; the signature is not checked), so
        a test can tell which key was used. Anything but a short string is recorded as None."""
        issuer = issuer if isinstance(issuer, str) and len(issuer) <= 1024 else None
        self.grants.append({"grantType": grant_type if isinstance(grant_type, str) else None, "issuer": issuer})

    def token_response(self) -> dict:
        return {"access_token": self.access_token, "expires_in": 3600, "token_type": "Bearer"}

    def classify(self, authorization: str | None) -> str | None:
        """None (no header), the kind of issued token it carries (see ``KINDS``), or
        "unknownAuthorization"."""
        if authorization is None:
            return None
        given = authorization.encode("utf-8", "surrogateescape")  # compare_digest refuses non-ASCII str
        for kind, token in zip(KINDS, (self.access_token, self.impersonated_token, self.federated_token)):
            if hmac.compare_digest(given, f"Bearer {token}".encode()):
                return kind
        return "unknownAuthorization"

    def admit(self, authorization: str | None, stats: dict) -> str | None:
        """Count a Google API request's credential kind in ``stats``; why it is refused, or None
        (every served Google API: Vertex, Cloud Logging, Compute)."""
        kind = self.classify(authorization)
        if kind:
            stats[kind] = stats.get(kind, 0) + 1
        if authorization is not None and not (authorization.isascii() and authorization.isprintable()):
            # no OAuth token holds such characters (RFC 6750 b64token): Google answers 401
            return "Request had invalid authentication credentials. Expected OAuth 2 access token."
        return self.refusal(kind)

    def refusal(self, kind: str | None) -> str | None:
        """Why a Vertex request is refused (401), or None."""
        if self.reject_tokens:
            return "Request had invalid authentication credentials (the emulator rejects every token)."
        if self.require_token and kind not in KINDS:
            return "Request is missing required authentication credential. Expected OAuth 2 access token."
        return None

    def _caller(self, authorization: str | None) -> str:
        kind = self.classify(authorization)
        if kind is None or kind == "unknownAuthorization" or self.reject_tokens:
            raise StandInError("UNAUTHENTICATED", "Request had invalid authentication credentials. "
                                                  "Expected OAuth 2 access token.")
        return kind

    # ------------------------------------------------------------------ IAM Credentials

    def generate_access_token(self, account: str, body: dict, authorization: str | None) -> dict:
        """``projects.serviceAccounts.generateAccessToken``: the caller's token must be one the
        emulator issued; ``scope`` has at least one value; ``delegates`` are
        ``projects/-/serviceAccounts/...``; ``lifetime`` at most 3600s."""
        caller = self._caller(authorization)
        scope, delegates = body.get("scope"), body.get("delegates") or []
        if not isinstance(scope, list) or not scope or not all(isinstance(s, str) and s for s in scope):
            raise StandInError("INVALID_ARGUMENT", "Scope required.")
        if not isinstance(delegates, list):
            delegates = [delegates]
        bad = [d for d in delegates if not (isinstance(d, str) and _ACCOUNT.fullmatch(d))]
        if bad:
            raise StandInError("INVALID_ARGUMENT", "Invalid form of account ID " + ", ".join(map(str, bad))
                               + ". Should be [Gaia ID |Email |Unique ID |] of the account")
        lifetime = str(body.get("lifetime") or "3600s")
        match = re.fullmatch(r"([0-9]{1,12})(?:\.[0-9]{1,9})?s", lifetime)
        if not match or int(match.group(1)) > 3600:
            raise StandInError("INVALID_ARGUMENT", f"lifetime must be at most 3600s (got {lifetime!r})")
        self.impersonations.append({"target": account, "delegates": list(delegates), "scope": list(scope),
                                    "caller": caller})
        expire = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=int(match.group(1)))
        return {"accessToken": self.impersonated_token, "expireTime": expire.strftime("%Y-%m-%dT%H:%M:%SZ")}

    # ------------------------------------------------------------------ STS

    def exchange_token(self, form: dict[str, str]) -> dict:
        """STS ``v1/token`` (RFC 8693 token exchange): the grant, the requested token type and the
        subject token type are checked; the subject token must be the planted one (if set)."""
        if form.get("grant_type") != TOKEN_EXCHANGE_GRANT:
            raise StandInError("invalid_request", f"grant_type must be {TOKEN_EXCHANGE_GRANT}")
        if form.get("requested_token_type") != ACCESS_TOKEN_TYPE:
            raise StandInError("invalid_request", f"requested_token_type must be {ACCESS_TOKEN_TYPE}")
        if form.get("subject_token_type") not in SUBJECT_TOKEN_TYPES:
            raise StandInError("invalid_request", "subject_token_type is not supported")
        if not form.get("audience", "").startswith("//iam.googleapis.com/"):
            raise StandInError("invalid_request", "audience must be the provider's full resource name "
                                                  "(//iam.googleapis.com/...)")
        subject = form.get("subject_token") or ""
        matched = self.subject_token is None or hmac.compare_digest(
            subject.encode("utf-8", "surrogateescape"), self.subject_token.encode())
        self.exchanges.append({"audience": form.get("audience"), "subjectTokenType": form.get("subject_token_type"),
                               "scope": form.get("scope", ""), "subjectTokenMatched": matched})
        if not subject or not matched:
            raise StandInError("invalid_grant", "The audience in ID Token does not match the expected audience, "
                                                "or the subject token is invalid.")
        return {"access_token": self.federated_token, "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer", "expires_in": 3600}

    # ------------------------------------------------------------------ Secret Manager

    def access_secret(self, project: str, secret: str, version: str, authorization: str | None) -> dict:
        """``projects.secrets.versions.access``: an issued token, a planted secret, version
        ``latest`` or ``1`` (one version per planted secret)."""
        caller = self._caller(authorization)
        if not _SECRET_ID.fullmatch(secret):
            raise StandInError("INVALID_ARGUMENT", f"Invalid secret id {secret!r}.")
        name = f"projects/{project}/secrets/{secret}"
        self.secret_accesses.append({"name": name, "version": version, "caller": caller})
        if name not in self.secrets or version not in ("latest", "1"):
            raise StandInError("NOT_FOUND", f"Secret [{name}] not found or has no versions.")
        # dataCrc32c left out: Secret Manager returns it only for versions added with a checksum
        return {"name": f"{name}/versions/1", "payload": {"data": base64.b64encode(self.secrets[name]).decode()}}
