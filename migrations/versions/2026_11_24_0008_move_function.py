"""move as a server-side function

Revision ID: 0008_move_function
Revises: 0007_delete_function
Create Date: 2026-11-24 03:30:00

``pathkeeper_move``: a move's whole rule in one call, so a lone move is one statement
(``coordinator/single_statement.py``) instead of BEGIN, the lock, the destination's
walk, the chain's locks, the update and the event with COMMIT; ``TreeTx.move`` calls it
inside a group. The rule is the one ``coordinator/tree.py`` describes: lock the node
(``pathkeeper_lock``, migration 0007); refuse the root and a stale version; resolve
the destination directory (a snapshot of its own, after the lock); a directory that
changes parent takes ``FOR KEY SHARE`` on every ancestor of its destination, in id
order, re-reading the chain until it holds all of them, and refuses a destination
inside itself; if that takes it deeper, it counts the levels of its subtree that fit
under ``p_max_depth``. The errors carry the SQLSTATEs of ``coordinator/db.py`` with the
messages the Python rule gave; a destination directory deleted after the walk is the
foreign key's violation, a taken name the unique constraint's (or the function's own
check, which names the path), and an ancestor that went away while being locked ends
the statement with ``40001``, which callers run again. ``ROWS 1``: see migration 0005.
"""

from __future__ import annotations

from alembic import op

revision = "0008_move_function"
down_revision = "0007_delete_function"
branch_labels = None
depends_on = None

MOVE_FUNCTION = r"""
CREATE FUNCTION pathkeeper_move(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_dst_parent text[], p_name text,
    p_if_version bigint, p_max_depth integer
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz,
    old_parent_id uuid, old_name text, old_path text, path text, changed boolean
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
    chain record;
    m integer := coalesce(array_length(p_dst_parent, 1), 0);
    reached integer;
    dst uuid;
    up_ids uuid[];
    locked uuid[] := '{}';
    missing uuid[];
    got integer;
    new_depth integer;
    budget integer;
    height integer;
BEGIN
    SELECT * INTO target FROM pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    old_path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = 'cannot move the root';
    END IF;
    IF p_if_version IS NOT NULL AND r.version <> p_if_version THEN
        RAISE EXCEPTION USING ERRCODE = 'PK004',
            MESSAGE = format('version is %s, expected %s', r.version, p_if_version);
    END IF;
    -- The destination directory.
    SELECT * INTO chain FROM pathkeeper_resolve(p_ns, p_dst_parent);
    IF chain.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format('no namespace %L', p_ns);
    END IF;
    reached := array_length(chain.ids, 1);
    IF reached <= m THEN
        IF chain.kinds[reached] <> 'dir' THEN
            RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
                '/' || array_to_string(p_dst_parent[1:reached - 1], '/'));
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format(
            '%s does not exist', '/' || array_to_string(p_dst_parent[1:reached], '/'));
    END IF;
    IF chain.kinds[m + 1] <> 'dir' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
            '/' || array_to_string(p_dst_parent, '/'));
    END IF;
    dst := chain.ids[m + 1];
    path := '/' || array_to_string(p_dst_parent || p_name, '/');
    old_parent_id := r.parent_id;
    old_name := r.name;
    changed := NOT (dst = r.parent_id AND p_name = r.name);
    IF changed THEN
        IF dst = r.id THEN
            RAISE EXCEPTION USING ERRCODE = 'PK003',
                MESSAGE = 'cannot move a directory into itself';
        END IF;
        IF r.kind = 'dir' AND dst <> r.parent_id THEN
            -- Freeze the destination's ancestor chain, then check we are not on it.
            FOR attempt IN 1..10 LOOP
                WITH RECURSIVE up(id, parent_id, depth) AS (
                    SELECT x.id, x.parent_id, 0
                    FROM nodes x WHERE x.namespace = p_ns AND x.id = dst
                  UNION ALL
                    SELECT x.id, x.parent_id, u.depth + 1
                    FROM up u JOIN nodes x ON x.namespace = p_ns AND x.id = u.parent_id
                    WHERE u.depth < 100000
                )
                SELECT array_agg(u.id ORDER BY u.depth DESC) INTO up_ids FROM up u;
                IF up_ids IS NULL THEN
                    RAISE EXCEPTION USING ERRCODE = 'PK001',
                        MESSAGE = 'the destination directory was deleted';
                END IF;
                IF r.id = ANY (up_ids) THEN
                    RAISE EXCEPTION USING ERRCODE = 'PK003',
                        MESSAGE = 'cannot move a directory into itself or its own subtree';
                END IF;
                missing := ARRAY(SELECT u FROM unnest(up_ids) AS u
                                 WHERE NOT u = ANY (locked) ORDER BY u);
                IF cardinality(missing) = 0 THEN
                    new_depth := cardinality(up_ids);
                    EXIT;
                END IF;
                SELECT count(*) INTO got FROM (
                    SELECT x.id FROM nodes x
                    WHERE x.namespace = p_ns AND x.id = ANY (missing)
                    ORDER BY x.id FOR KEY SHARE
                ) AS k;
                IF got <> cardinality(missing) THEN
                    RAISE EXCEPTION USING ERRCODE = '40001',
                        MESSAGE = 'the destination changed while its ancestors were locked';
                END IF;
                locked := locked || missing;
            END LOOP;
            IF new_depth IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = '40001',
                    MESSAGE = 'the destination kept changing while its ancestors were locked';
            END IF;
            IF new_depth > coalesce(array_length(string_to_array(old_path, '/'), 1), 1) - 1
            THEN
                -- Only levels up to the limit are walked: the cost is what fits.
                budget := p_max_depth - new_depth;
                WITH RECURSIVE sub(id, kind, depth) AS (
                    SELECT x.id, x.kind, 0 FROM nodes x
                    WHERE x.namespace = p_ns AND x.id = r.id
                  UNION ALL
                    SELECT x.id, x.kind, s.depth + 1
                    FROM sub s JOIN nodes x ON x.namespace = p_ns AND x.parent_id = s.id
                    WHERE s.kind = 'dir' AND s.depth <= budget
                )
                SELECT max(s.depth) INTO height FROM sub s;
                IF height IS NOT NULL AND height > budget THEN
                    RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = format(
                        'moving to %s would put nodes deeper than %s levels (the directory '
                        'has at least %s levels below it; at most %s fit there)',
                        path, p_max_depth, height, budget);
                END IF;
            END IF;
        END IF;
        -- The unique constraint would refuse it too, but without the path.
        IF EXISTS (SELECT FROM nodes x WHERE x.namespace = p_ns
                   AND x.parent_id = dst AND x.name = p_name) THEN
            RAISE EXCEPTION USING ERRCODE = 'unique_violation',
                MESSAGE = format('%s already exists', path);
        END IF;
        UPDATE nodes x SET parent_id = dst, name = p_name, version = x.version + 1,
                           updated_at = now()
        WHERE x.namespace = p_ns AND x.id = r.id
        RETURNING x.* INTO r;
    ELSE
        path := old_path;
    END IF;
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    RETURN NEXT;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(MOVE_FUNCTION)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION pathkeeper_move(text, text, text[], uuid, text[], text, bigint, integer)"
    )
