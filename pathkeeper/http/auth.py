"""Who is calling: an ``Authorization: Bearer <secret>`` header becomes a ``Principal``
(the key's id, scope and namespaces; keys are stored by ``coordinator.api_keys``).

A key asking about a namespace outside its list gets the same 404 as a namespace
that does not exist, decided before any database access, so neither the answer nor
its timing reveals whether the namespace exists. A key lacking the scope for an
operation on one of its own namespaces gets 403.

Every ``/v1`` request is authenticated by the limits (``limits``) before it takes an
in-flight slot; they leave the principal in the request's scope under
``PRINCIPAL_SCOPE_KEY``, where the fast path and FastAPI's scope checks find it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy import Engine

from coordinator.api_keys import ALL, KEY_PREFIX, SCOPES, find_active_key, hash_secret
from pathkeeper.http.errors import forbidden, hidden_namespace, unauthorized
from pathkeeper.http.threads import in_thread

#: The ASGI scope key under which the limits leave the request's ``Principal``.
PRINCIPAL_SCOPE_KEY = "pathkeeper.principal"

#: Key lookups in the database at a time, per process, of each kind: credentials never
#: seen valid (made up, or a key's first use), and keys valid when last looked up (their
#: cache entry expired). A request waits for one of these, never for a request slot,
#: and a flood of made-up keys never delays the lookup of a known key.
MAX_LOOKUPS = 4


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


def bearer_of(authorization: str | None) -> str | None:
    """The bearer credentials of an ``Authorization`` header ("<scheme> <credentials>"),
    or None when it holds none (the rule of FastAPI's ``HTTPBearer``)."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and credentials) or scheme.lower() != "bearer":
        return None
    return f"{scheme} {credentials}"


class Authenticator:
    """Turns an ``Authorization: Bearer <secret>`` header into a ``Principal``."""

    def __init__(self, engine: Engine, cache_seconds: float = 5.0) -> None:
        self._engine = engine
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        # Per event loop (an app may be served by more than one, one after another)
        # and per kind of lookup (``MAX_LOOKUPS``): new credentials, known keys.
        self._lookups: dict[tuple[asyncio.AbstractEventLoop, bool], asyncio.Semaphore] = {}

    async def principal(self, bearer: str | None) -> Principal:
        """The principal of bearer credentials (see ``bearer_of``; 401 without a valid
        key): a key seen in the last ``cache_seconds`` is answered on the event loop,
        else it is looked up in a thread, ``MAX_LOOKUPS`` at a time."""
        if bearer is None:
            raise unauthorized()
        cached = self.cached(bearer)
        if cached is not None:
            return cached
        which = (asyncio.get_running_loop(), self.is_new(bearer))
        gate = self._lookups.get(which)
        if gate is None:
            gate = self._lookups[which] = asyncio.Semaphore(MAX_LOOKUPS)
        async with gate:
            return await in_thread(self.authenticate, bearer)

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

    def is_new(self, authorization: str | None) -> bool:
        """Whether these credentials would need a lookup and never passed one (made up,
        revoked, or a key's first use); False for a header that cannot hold a key (it
        fails without I/O) and for a key that was valid when last looked up."""
        digest = self._digest(authorization)
        if digest is None:
            return False
        with self._lock:
            return digest not in self._cache

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
            with self._lock:
                self._cache.pop(digest, None)  # revoked: new again
            raise unauthorized()
        principal = Principal(key.id, key.scope, key.namespaces)
        # Kept past its time too (then looked up again, never answered from here): a
        # key that was valid is not new (``is_new``). Only valid keys get in.
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now + self._cache_seconds, principal)
        return principal
