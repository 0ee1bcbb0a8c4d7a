"""API keys: high-entropy secrets shown once, stored as SHA-256 hashes, with a scope
(read < write < admin) and the namespaces they may touch (``*`` = all).

A key asking about a namespace outside its list gets the same 404 as a namespace
that does not exist, decided before any database access, so neither the answer nor
its timing reveals whether the namespace exists. A key lacking the scope for an
operation on one of its own namespaces gets 403.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from coordinator import paths
from pathkeeper.http.errors import forbidden, hidden_namespace, unauthorized

SCOPES = ("read", "write", "admin")
KEY_PREFIX = "pk_"
ALL = "*"


@dataclass(frozen=True)
class Principal:
    key_id: str
    scope: str
    namespaces: tuple[str, ...]

    def covers(self, ns: str) -> bool:
        return ALL in self.namespaces or ns in self.namespaces

    def has(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def require(self, ns: str | None, scope: str) -> None:
        """Raise unless this key may do a ``scope`` operation on ``ns``."""
        if ns is not None and not self.covers(ns):
            raise hidden_namespace(ns)
        if not self.has(scope):
            raise forbidden(f"this API key has scope {self.scope!r}; {scope!r} is needed")


#: The principal of every request when auth is disabled (local development only).
NO_AUTH = Principal("no-auth", "admin", (ALL,))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    id: str
    scope: str
    namespaces: list[str]
    label: str
    created_at: datetime
    revoked_at: datetime | None


def create_key(
    engine: Engine, namespaces: Sequence[str], scope: str, label: str = ""
) -> tuple[str, str]:
    """Store a new key; returns (key id, secret). The secret is not stored and cannot be
    shown again."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    if not namespaces:
        raise ValueError("a key needs at least one namespace (or '*')")
    nss = [ns if ns == ALL else paths.validate_namespace(ns) for ns in namespaces]
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_keys (id, key_hash, namespaces, scope, label) "
                "VALUES (:id, :h, :nss, :scope, :label)"
            ),
            {"id": key_id, "h": hash_secret(secret), "nss": nss, "scope": scope, "label": label},
        )
    return key_id, secret


def revoke_key(engine: Engine, key_id: str) -> bool:
    """Revoke a key by id; False if no such active key."""
    try:
        uuid.UUID(key_id)
    except ValueError:
        return False
    with engine.begin() as conn:
        n = conn.execute(
            text("UPDATE api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL"),
            {"id": key_id},
        ).rowcount
    return bool(n)


def list_keys(engine: Engine) -> list[KeyInfo]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, scope, namespaces, label, created_at, revoked_at "
                "FROM api_keys ORDER BY created_at, id"
            )
        ).all()
    return [
        KeyInfo(str(r.id), r.scope, list(r.namespaces), r.label, r.created_at, r.revoked_at)
        for r in rows
    ]


class Authenticator:
    """Turns an ``Authorization: Bearer <secret>`` header into a ``Principal``."""

    def __init__(self, engine: Engine, cache_seconds: float = 5.0) -> None:
        self._engine = engine
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise unauthorized()
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret.startswith(KEY_PREFIX) or len(secret) > 200:
            raise unauthorized()
        digest = hash_secret(secret)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self._engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT id, scope, namespaces FROM api_keys "
                    "WHERE key_hash = :h AND revoked_at IS NULL"
                ),
                {"h": digest},
            ).one_or_none()
        if row is None:
            raise unauthorized()
        principal = Principal(str(row.id), row.scope, tuple(row.namespaces))
        if self._cache_seconds > 0:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now + self._cache_seconds, principal)
        return principal
