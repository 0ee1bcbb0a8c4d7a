"""API keys at rest: high-entropy secrets shown once, stored as SHA-256 hashes, with a
scope (read < write < admin) and the namespaces they may touch (``*`` = all).

This module is the storage (create, revoke, list, look up by hash); what a key may do
on a request, and the answers a caller gets, is the HTTP layer's
(``pathkeeper.http.auth``).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, text

from . import paths
from .db import translated
from .errors import InvalidArgument

SCOPES = ("read", "write", "admin")
KEY_PREFIX = "pk_"
ALL = "*"


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


@dataclass(frozen=True)
class ActiveKey:
    """What a request needs of a key that is not revoked."""

    id: str
    scope: str
    namespaces: tuple[str, ...]


def create_key(
    engine: Engine, namespaces: Sequence[str], scope: str, label: str = ""
) -> tuple[str, str]:
    """Store a new key; returns (key id, secret). The secret is not stored and cannot be
    shown again. A database error is raised as its typed error, as from every function
    of this module."""
    if scope not in SCOPES:
        raise InvalidArgument(f"scope must be one of {', '.join(SCOPES)}")
    if not namespaces:
        raise InvalidArgument("a key needs at least one namespace (or '*')")
    nss = [ns if ns == ALL else paths.validate_namespace(ns) for ns in namespaces]
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = str(uuid.uuid4())
    with translated(), engine.begin() as conn:
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
    with translated(), engine.begin() as conn:
        n = conn.execute(
            text("UPDATE api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL"),
            {"id": key_id},
        ).rowcount
    return bool(n)


def list_keys(engine: Engine) -> list[KeyInfo]:
    with translated(), engine.connect() as conn:
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


def find_active_key(engine: Engine, secret_hash: str) -> ActiveKey | None:
    """The key whose secret hashes to ``secret_hash``, unless revoked or unknown."""
    with translated(), engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT id, scope, namespaces FROM api_keys "
                "WHERE key_hash = :h AND revoked_at IS NULL"
            ),
            {"h": secret_hash},
        ).one_or_none()
    return None if row is None else ActiveKey(str(row.id), row.scope, tuple(row.namespaces))
