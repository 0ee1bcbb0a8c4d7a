"""create as a server-side function

Revision ID: 0006_create_function
Revises: 0005_rename_function_rows
Create Date: 2026-11-24 00:10:00

``pathkeeper_create``: a create's whole rule (resolve the parent in the statement's
snapshot, refuse a missing or file parent, insert the row) in one call, so a lone
create is one statement (``coordinator/single_statement.py``) instead of BEGIN, the
walk, the insert and the event with COMMIT. ``coordinator/tree.py`` runs the same rule
in Python inside a group. The errors carry the SQLSTATEs of ``coordinator/db.py``
(``PK001`` not found, ``PK002`` not a directory) with the messages the Python rule
gives; a taken name is the unique constraint's violation and a parent deleted since the
walk the foreign key's, which the caller words as the Python rule does.

The insert is a statement of the function: its foreign-key check (which waits if a
concurrent transaction holds the parent row) ends before the function returns, so the
caller's claim of event positions still comes after every lock wait (the rule of
``coordinator/eventlog.py``). ``ROWS 1``: see migration 0005.
"""

from __future__ import annotations

from alembic import op

revision = "0006_create_function"
down_revision = "0005_rename_function_rows"
branch_labels = None
depends_on = None

CREATE_FUNCTION = r"""
CREATE FUNCTION pathkeeper_create(
    p_ns text, p_parent text[], p_id uuid, p_name text, p_kind text, p_content text,
    p_metadata jsonb
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    chain record;
    n integer := coalesce(array_length(p_parent, 1), 0);
    reached integer;
BEGIN
    SELECT * INTO chain FROM pathkeeper_resolve(p_ns, p_parent);
    IF chain.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format('no namespace %L', p_ns);
    END IF;
    reached := array_length(chain.ids, 1);
    IF reached <= n THEN
        IF chain.kinds[reached] <> 'dir' THEN
            RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
                '/' || array_to_string(p_parent[1:reached - 1], '/'));
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format(
            '%s does not exist', '/' || array_to_string(p_parent[1:reached], '/'));
    END IF;
    IF chain.kinds[n + 1] <> 'dir' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
            '/' || array_to_string(p_parent, '/'));
    END IF;
    RETURN QUERY
    INSERT INTO nodes AS x (namespace, id, parent_id, name, kind, content, metadata)
    VALUES (p_ns, p_id, chain.ids[n + 1], p_name, p_kind, p_content, p_metadata)
    RETURNING x.id, x.parent_id, x.name, x.kind, x.version, x.content, x.metadata,
              x.created_at, x.updated_at;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(CREATE_FUNCTION)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION pathkeeper_create(text, text[], uuid, text, text, text, jsonb)"
    )
