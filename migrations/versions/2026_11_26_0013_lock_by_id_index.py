"""pathkeeper_lock by id reads its row and ancestors through (namespace, id)

Revision ID: 0013_lock_by_id_index
Revises: 0012_copy_function
Create Date: 2026-11-26 11:15:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``), which changes ``pathkeeper_lock``
(``fn_lock.sql``): by id, its reads name (namespace, id) also as a row comparison so the
planner uses the (namespace, id) index before ``nodes`` has statistics, and the
ancestors' walk starts from the locked row and probes one parent per level. Every other
function's body is unchanged.

Downgrade: ``pathkeeper_lock`` as 0012 left it (frozen below).
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0013_lock_by_id_index"
down_revision = "0012_copy_function"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "56e4e57dceb0794c"

#: ``pathkeeper_lock`` as 0012 installed it (``fn_lock.sql`` before this revision).
_LOCK_0012 = r"""
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
            SELECT * INTO r FROM nodes x WHERE x.namespace = p_ns AND x.id = p_id FOR UPDATE;
        ELSE
            SELECT * INTO r FROM nodes x WHERE x.namespace = p_ns AND x.id = p_id
            FOR NO KEY UPDATE;
        END IF;
        IF r.id IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PK001',
                MESSAGE = format('no node with id %s', p_ref);
        END IF;
        WITH RECURSIVE up(id, parent_id, name, depth) AS (
            SELECT x.id, x.parent_id, x.name, 0
            FROM nodes x WHERE x.namespace = p_ns AND x.id = p_id
          UNION ALL
            SELECT x.id, x.parent_id, x.name, u.depth + 1
            FROM up u JOIN nodes x ON x.namespace = p_ns AND x.id = u.parent_id
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


def upgrade() -> None:
    install(op.execute)


def downgrade() -> None:
    op.execute(_LOCK_0012)
