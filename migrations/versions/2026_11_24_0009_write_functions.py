"""content and metadata writes as server-side functions

Revision ID: 0009_write_functions
Revises: 0008_move_function
Create Date: 2026-11-24 04:15:00

``pathkeeper_write`` (a file's content, and its metadata if given) and
``pathkeeper_set_metadata`` (a file's or a directory's metadata): each rule in one call,
so a lone write is one statement (``coordinator/single_statement.py``) instead of BEGIN,
the lock, the update and the event with COMMIT; ``TreeTx`` calls them inside a group.
The node is locked ``FOR NO KEY UPDATE`` (``pathkeeper_lock``, migration 0007): a write
does not change the row's key, so creates under a directory whose metadata is being set
go on. The errors carry the SQLSTATEs of ``coordinator/db.py`` with the messages the
Python rule gave (``PK006`` a directory where a file was expected, ``PK007`` an
argument the node cannot take). The content's and the metadata's own checks stay in
Python, before the call. ``ROWS 1``: see migration 0005.
"""

from __future__ import annotations

from alembic import op

revision = "0009_write_functions"
down_revision = "0008_move_function"
branch_labels = None
depends_on = None

_RETURNS = """RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz, path text
) LANGUAGE plpgsql ROWS 1"""

_ANSWER = """
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    RETURN NEXT;
"""

WRITE_FUNCTION = rf"""
CREATE FUNCTION pathkeeper_write(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_content text, p_metadata jsonb,
    p_if_version bigint
) {_RETURNS} AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
BEGIN
    SELECT * INTO target FROM pathkeeper_lock(p_ns, p_ref, p_parts, p_id, false);
    r := target.node;
    path := target.path;
    IF r.kind = 'dir' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK006', MESSAGE = format('%s is a directory', path);
    END IF;
    IF p_if_version IS NOT NULL AND r.version <> p_if_version THEN
        RAISE EXCEPTION USING ERRCODE = 'PK004',
            MESSAGE = format('version is %s, expected %s', r.version, p_if_version);
    END IF;
    UPDATE nodes x SET content = p_content, metadata = COALESCE(p_metadata, x.metadata),
                       version = x.version + 1, updated_at = now()
    WHERE x.namespace = p_ns AND x.id = r.id
    RETURNING x.* INTO r;
{_ANSWER}
END
$fn$;
"""

SET_METADATA_FUNCTION = rf"""
CREATE FUNCTION pathkeeper_set_metadata(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_metadata jsonb, p_if_version bigint
) {_RETURNS} AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
BEGIN
    SELECT * INTO target FROM pathkeeper_lock(p_ns, p_ref, p_parts, p_id, false);
    r := target.node;
    path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK007', MESSAGE = 'the root has no metadata';
    END IF;
    IF p_if_version IS NOT NULL AND r.version <> p_if_version THEN
        RAISE EXCEPTION USING ERRCODE = 'PK004',
            MESSAGE = format('version is %s, expected %s', r.version, p_if_version);
    END IF;
    UPDATE nodes x SET metadata = p_metadata, version = x.version + 1, updated_at = now()
    WHERE x.namespace = p_ns AND x.id = r.id
    RETURNING x.* INTO r;
{_ANSWER}
END
$fn$;
"""


def upgrade() -> None:
    op.execute(WRITE_FUNCTION)
    op.execute(SET_METADATA_FUNCTION)


def downgrade() -> None:
    op.execute("DROP FUNCTION pathkeeper_set_metadata(text, text, text[], uuid, jsonb, bigint)")
    op.execute(
        "DROP FUNCTION pathkeeper_write(text, text, text[], uuid, text, jsonb, bigint)"
    )
