"""pathkeeper_copy: a file or a subtree copied in one call; the depth limit in one place

Revision ID: 0012_copy_function
Revises: 0011_functions_from_files
Create Date: 2026-11-26 11:00:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``), which adds ``pathkeeper_copy``
(``fn_copy.sql``) and two helpers that the move and the copy share, so the depth limit
is written once: ``pathkeeper_subtree_extent`` (a subtree's nodes and levels, walked
only as far as a limit reaches) and ``pathkeeper_check_depth`` (the refusal and its
wording, SQLSTATE PK003 as before). ``pathkeeper_move`` calls them instead of its own
walk; its signature, result and messages are unchanged. Every other body is unchanged.

Downgrade: drops ``pathkeeper_copy`` and the two helpers and re-creates 0011's
``pathkeeper_move`` from the copy frozen here (0011 installs the files as they are
now, so it cannot bring that body back itself).
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0012_copy_function"
down_revision = "0011_functions_from_files"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "cfc6141dafdc3728"


def upgrade() -> None:
    install(op.execute)


def downgrade() -> None:
    for signature in (
        "pathkeeper_copy(text, text, text[], uuid, text[], text, bigint, integer, integer)",
        "pathkeeper_check_depth(text, integer, integer, integer)",
        "pathkeeper_subtree_extent(text, uuid, integer, integer)",
    ):
        op.execute(f"DROP FUNCTION {signature}")
    op.execute(_MOVE_0011)


#: ``pathkeeper_move`` as 0011 installed it (``fn_move.sql`` then), with its own depth
#: walk and wording.
_MOVE_0011 = r"""
-- pathkeeper_move: a move's whole rule in one call, so a lone move is one statement
-- (coordinator/single_statement.py): lock the node (pathkeeper_lock); refuse the root
-- (PK003) and a stale version (pathkeeper_check_version); the destination directory
-- (pathkeeper_walk_path, a snapshot of its own, after the lock); a directory that
-- changes parent takes FOR KEY SHARE on every ancestor of its destination, in id order,
-- re-reading the chain until it holds all of them, and refuses a destination inside
-- itself; if that takes it deeper, it counts the levels of its subtree that fit under
-- p_max_depth; a free name (pathkeeper_check_name_free); the update. A destination
-- deleted after the walk is the foreign key's violation, a sibling committed after the
-- name check the unique constraint's, and an ancestor that went away while being
-- locked ends the statement with 40001, which callers run again. ROWS 1: see
-- fn_rename.sql.
CREATE OR REPLACE FUNCTION pathkeeper_move(
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
    dst uuid;
    up_ids uuid[];
    locked uuid[] := '{}';
    missing uuid[];
    got integer;
    new_depth integer;
    budget integer;
    height integer;
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    old_path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = 'cannot move the root';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
    dst := pathkeeper_walk_path(p_ns, p_dst_parent, true);
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
        PERFORM pathkeeper_check_name_free(p_ns, dst, p_name, path);
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
