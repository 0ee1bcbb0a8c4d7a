"""the shard fence: writers check the namespace's placement; freeze and unfreeze

Revision ID: 0015_shard_fence
Revises: 0014_namespace_placement
Create Date: 2026-11-26 13:30:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``): the new ``pathkeeper_check_placed``
(``fn_check_placed.sql``: the namespace's fence lock shared, then PK009 if it is frozen
here, PK010 if gone or incoming), called first thing by ``pathkeeper_lock`` and
``pathkeeper_create`` (and by the event log's claiming statement, which is Python's);
``pathkeeper_freeze_namespace`` and ``pathkeeper_unfreeze_namespace``, which a move
calls (docs/sharding.md). Every other function's body is unchanged.

Downgrade: ``pathkeeper_lock`` and ``pathkeeper_create`` as 0013 left them (frozen
below), the three new functions dropped.
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0015_shard_fence"
down_revision = "0014_namespace_placement"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "a4e30af36b8e6f35"

#: ``pathkeeper_lock`` as 0013 installed it (``fn_lock.sql`` before this revision).
_LOCK_0013 = r"""
CREATE OR REPLACE FUNCTION pathkeeper_lock(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_key boolean,
    OUT node nodes, OUT path text
) LANGUAGE plpgsql AS $fn$
DECLARE
    r nodes%ROWTYPE;
    n integer := coalesce(array_length(p_parts, 1), 0);
    names text[];
    cur uuid;
BEGIN
    IF p_id IS NOT NULL THEN
        IF p_key THEN
            SELECT * INTO r FROM nodes x WHERE x.namespace = p_ns AND x.id = p_id
              AND (x.namespace, x.id) >= (p_ns, p_id)
            FOR UPDATE;
        ELSE
            SELECT * INTO r FROM nodes x WHERE x.namespace = p_ns AND x.id = p_id
              AND (x.namespace, x.id) >= (p_ns, p_id)
            FOR NO KEY UPDATE;
        END IF;
        IF r.id IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PK001',
                MESSAGE = format('no node with id %s', p_ref);
        END IF;
        WITH RECURSIVE up(id, parent_id, name, depth) AS (
            SELECT r.id, r.parent_id, r.name, 0
          UNION ALL
            SELECT x.id, x.parent_id, x.name, u.depth + 1
            FROM up u CROSS JOIN LATERAL (
                SELECT y.id, y.parent_id, y.name FROM nodes y
                WHERE y.namespace = p_ns AND y.id = u.parent_id
                  AND (y.namespace, y.id) >= (p_ns, u.parent_id)
                LIMIT 1
            ) x
            WHERE u.depth < 100000
        )
        SELECT array_agg(u.name ORDER BY u.depth DESC) INTO names FROM up u;
        path := '/' || array_to_string(names[2:], '/');
    ELSE
        FOR attempt IN 1..5 LOOP
            IF p_key THEN
                SELECT * INTO r FROM nodes x
                WHERE x.namespace = p_ns
                  AND x.id = (SELECT (pathkeeper_resolve(p_ns, p_parts)).ids[n + 1])
                FOR UPDATE;
            ELSE
                SELECT * INTO r FROM nodes x
                WHERE x.namespace = p_ns
                  AND x.id = (SELECT (pathkeeper_resolve(p_ns, p_parts)).ids[n + 1])
                FOR NO KEY UPDATE;
            END IF;
            -- An expression of its own, so a snapshot of its own; raises if the path
            -- leads nowhere now.
            cur := pathkeeper_walk_path(p_ns, p_parts, false);
            IF r.id IS NOT NULL AND cur = r.id THEN
                path := '/' || array_to_string(p_parts, '/');
                EXIT;
            END IF;
            r := NULL;
        END LOOP;
        IF r.id IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PK004',
                MESSAGE = format('%s kept changing while it was being locked', p_ref);
        END IF;
    END IF;
    node := r;
END
$fn$;
"""

#: ``pathkeeper_create`` as 0011 installed it (``fn_create.sql`` before this revision).
_CREATE_0011 = r"""
CREATE OR REPLACE FUNCTION pathkeeper_create(
    p_ns text, p_parent text[], p_id uuid, p_name text, p_kind text, p_content text,
    p_metadata jsonb
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    dir uuid;
BEGIN
    dir := pathkeeper_walk_path(p_ns, p_parent, true);
    PERFORM pathkeeper_check_name_free(
        p_ns, dir, p_name, '/' || array_to_string(p_parent || p_name, '/'));
    RETURN QUERY
    INSERT INTO nodes AS x (namespace, id, parent_id, name, kind, content, metadata)
    VALUES (p_ns, p_id, dir, p_name, p_kind, p_content, p_metadata)
    RETURNING x.id, x.parent_id, x.name, x.kind, x.version, x.content, x.metadata,
              x.created_at, x.updated_at;
END
$fn$;
"""

_DROP = """
DROP FUNCTION pathkeeper_unfreeze_namespace(text);
DROP FUNCTION pathkeeper_freeze_namespace(text);
DROP FUNCTION pathkeeper_check_placed(text);
"""


def upgrade() -> None:
    install(op.execute)


def downgrade() -> None:
    op.execute(_LOCK_0013)
    op.execute(_CREATE_0011)
    op.execute(_DROP)
