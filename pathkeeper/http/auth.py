"""Who is calling: an ``Authorization: Bearer <secret>`` header becomes a ``Principal``
(the key's id, scope and namespaces; keys are stored by ``coordinator.api_keys``).

A key asking about a namespace outside its list gets the same 404 as a namespace
that does not exist, decided before any database access, so neither the answer nor
its timing reveals whether the namespace exists. A key lacking the scope for an
operation on one of its own namespaces gets 403.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import Engine

from coordinator.api_keys import ALL, KEY_PREFIX, SCOPES, find_active_key, hash_secret
from pathkeeper.http.errors import forbidden, hidden_namespace, unauthorized


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


class Authenticator:
    """Turns an ``Authorization: Bearer <secret>`` header into a ``Principal``."""

    def __init__(self, engine: Engine, cache_seconds: float = 5.0) -> None:
        self._engine = engine
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _digest(authorization: str | None) -> str | None:
        """The hash of the header's secret; None for a header that cannot hold a key."""
        if not authorization:
            return None
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret.startswith(KEY_PREFIX) or len(secret) > 200:
            return None
        return hash_secret(secret)

    def cached(self, authorization: str | None) -> Principal | None:
        """The principal of a key looked up less than ``cache_seconds`` ago, else None
        (no I/O: ``authenticate`` looks it up)."""
        digest = self._digest(authorization)
        if digest is None:
            return None
        with self._lock:
            hit = self._cache.get(digest)
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def authenticate(self, authorization: str | None) -> Principal:
        digest = self._digest(authorization)
        if digest is None:
            raise unauthorized()
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        key = find_active_key(self._engine, digest)
        if key is None:
            raise unauthorized()
        principal = Principal(key.id, key.scope, key.namespaces)
        if self._cache_seconds > 0:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now + self._cache_seconds, principal)
        return principal
