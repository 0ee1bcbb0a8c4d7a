"""delete as a server-side function

Revision ID: 0007_delete_function
Revises: 0006_create_function
Create Date: 2026-11-24 03:20:00

``pathkeeper_lock``: the node a mutation names, locked ``FOR UPDATE`` (``p_key``; else
``FOR NO KEY UPDATE``, for a change that leaves the key alone), and its path, with
``pathkeeper_rename``'s protocol and errors (by path: resolve, lock, resolve again in a
statement of its own until the path leads to the locked row); for the functions below
and later ones (migration 0004's rename keeps its own copy: migrations do not change).

``pathkeeper_delete``: a delete's whole rule (lock the node with ``pathkeeper_lock``,
refuse the root and a stale version, refuse a directory
that is not empty unless recursive, delete the node with its subtree) in one call, so a
lone delete is one statement (``coordinator/single_statement.py``) instead of BEGIN,
the lock, the check, the delete and the event with COMMIT; ``TreeTx.delete`` calls it
inside a group. The errors carry the SQLSTATEs of ``coordinator/db.py`` (``PK001``
not found, ``PK002`` not a directory, ``PK003`` the root, ``PK004`` a conflict,
``PK005`` not empty) with the messages the Python rule gave.

Two races end the statement with ``40001`` (serialization failure), which callers run
again on a fresh snapshot, as they do a deadlock: the subtree is read in the delete's
snapshot and a row a transaction we waited for changed is re-checked by id only, so a
node moved out of the subtree meanwhile would be deleted with it (its new parent, not in
the subtree, gives it away); and a create deeper in the subtree that committed while we
deleted is the foreign key's violation, which the caller turns into a re-run too.
``ROWS 1``: see migration 0005.
"""

from __future__ import annotations

from alembic import op

revision = "0007_delete_function"
down_revision = "0006_create_function"
branch_labels = None
depends_on = None

LOCK_FUNCTION = r"""
CREATE FUNCTION pathkeeper_lock(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_key boolean,
    OUT node nodes, OUT path text
) LANGUAGE plpgsql AS $fn$
DECLARE
    r nodes%ROWTYPE;
    chain record;
    n integer := coalesce(array_length(p_parts, 1), 0);
    reached integer;
    names text[];
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
        -- Resolve and lock, then resolve again (a statement, so a snapshot, of its
        -- own): the path must still lead to the row that was locked.
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
            SELECT * INTO chain FROM pathkeeper_resolve(p_ns, p_parts);
            IF chain.ids IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'PK001',
                    MESSAGE = format('no namespace %L', p_ns);
            END IF;
            reached := array_length(chain.ids, 1);
            IF reached <= n THEN
                IF chain.kinds[reached] <> 'dir' THEN
                    RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
                        '/' || array_to_string(p_parts[1:reached - 1], '/'));
                END IF;
                RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format(
                    '%s does not exist', '/' || array_to_string(p_parts[1:reached], '/'));
            END IF;
            IF r.id IS NOT NULL AND chain.ids[n + 1] = r.id THEN
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

DELETE_FUNCTION = r"""
CREATE FUNCTION pathkeeper_delete(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_recursive boolean,
    p_if_version bigint
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz,
    path text, count integer
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
    gone uuid[];
    parents uuid[];
BEGIN
    SELECT * INTO target FROM pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003',
            MESSAGE = 'cannot delete the root (drop the namespace instead)';
    END IF;
    IF p_if_version IS NOT NULL AND r.version <> p_if_version THEN
        RAISE EXCEPTION USING ERRCODE = 'PK004',
            MESSAGE = format('version is %s, expected %s', r.version, p_if_version);
    END IF;
    -- The lock waited for any create in flight directly inside.
    IF r.kind = 'dir' AND NOT p_recursive
       AND EXISTS (SELECT FROM nodes x WHERE x.namespace = p_ns AND x.parent_id = r.id) THEN
        RAISE EXCEPTION USING ERRCODE = 'PK005', MESSAGE = format('%s is not empty', path);
    END IF;
    WITH RECURSIVE sub(id) AS (
        SELECT r.id
      UNION ALL
        SELECT x.id FROM sub s JOIN nodes x ON x.namespace = p_ns AND x.parent_id = s.id
    ), del AS (
        DELETE FROM nodes x WHERE x.namespace = p_ns AND x.id IN (SELECT sub.id FROM sub)
        RETURNING x.id, x.parent_id
    )
    SELECT array_agg(del.id), array_agg(del.parent_id) INTO gone, parents FROM del;
    IF EXISTS (SELECT FROM unnest(gone, parents) AS g(gid, gparent)
               WHERE g.gid <> r.id AND NOT g.gparent = ANY (gone)) THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = 'a node moved out of the subtree while it was being deleted';
    END IF;
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    count := coalesce(array_length(gone, 1), 0);
    RETURN NEXT;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(LOCK_FUNCTION)
    op.execute(DELETE_FUNCTION)


def downgrade() -> None:
    op.execute("DROP FUNCTION pathkeeper_delete(text, text, text[], uuid, boolean, bigint)")
    op.execute("DROP FUNCTION pathkeeper_lock(text, text, text[], uuid, boolean)")
