"""Walks name the namespace by the row's column, not by a constant

Revision ID: 0019_walks_by_row_namespace
Revises: 0018_namespace_distinct_estimate
Create Date: 2026-11-27 07:00:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``), which changes the recursive walks of
``pathkeeper_delete``, ``pathkeeper_copy``, ``pathkeeper_subtree_extent`` and
``pathkeeper_move``: each step finds the next rows by the namespace of the row before
(``x.namespace = s.namespace``), never by ``p_ns``; the delete removes the walked rows
by (namespace, id); a walk's start, and the move's locks on the ancestors of its
destination (now one probe each), name (namespace, id) also as a row comparison.

With statistics that saw a namespace empty (or not at all), the planner estimated it at
one row. The recursive delete of a directory of 2,001 nodes was then planned to compare
every node with every walked row: 12,048,062 rows handled, 37,065 now. A move or a copy
of an empty directory three levels down scanned the namespace at each level of the walk
up from its destination (and at its start): 60,283 and 38,184 rows in a namespace of
2,008 nodes, 99 and 66 now (``tests/test_subtree_walks.py``). Joined to the row's
column, the estimate is the table's rows over its number of namespaces (0018). Every
other function's body is unchanged.

Downgrade: the four functions as 0018 left them (frozen below).
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0019_walks_by_row_namespace"
down_revision = "0018_namespace_distinct_estimate"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "d0fe28cbb555ced1"

#: ``fn_delete.sql`` as 0018 left it.
_DELETE_0018 = r"""
CREATE OR REPLACE FUNCTION pathkeeper_delete(
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
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003',
            MESSAGE = 'cannot delete the root (drop the namespace instead)';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
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

#: ``fn_copy.sql`` as 0018 left it.
_COPY_0018 = r"""
CREATE OR REPLACE FUNCTION pathkeeper_copy(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_dst_parent text[], p_name text,
    p_if_version bigint, p_max_depth integer, p_max_nodes integer
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz, path text
) LANGUAGE plpgsql AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
    dst uuid;
    top_name text;
    top_path text;
    budget integer;
    got integer;
    height integer;
    c record;
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, false);
    r := target.node;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = 'cannot copy the root';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
    dst := pathkeeper_walk_path(p_ns, p_dst_parent, true);
    top_name := coalesce(p_name, r.name);
    top_path := '/' || array_to_string(p_dst_parent || top_name, '/');
    IF r.kind = 'dir' THEN
        -- The destination's ancestors, read after the lock: none may be the source.
        IF EXISTS (
            WITH RECURSIVE up(id, parent_id, depth) AS (
                SELECT x.id, x.parent_id, 0 FROM nodes x
                WHERE x.namespace = p_ns AND x.id = dst
              UNION ALL
                SELECT x.id, x.parent_id, u.depth + 1
                FROM up u JOIN nodes x ON x.namespace = p_ns AND x.id = u.parent_id
                WHERE u.depth < 100000
            )
            SELECT FROM up u WHERE u.id = r.id
        ) THEN
            RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = format(
                'cannot copy %s into itself or its own subtree (%s)',
                target.path, top_path);
        END IF;
    END IF;
    PERFORM pathkeeper_check_name_free(p_ns, dst, top_name, top_path);
    -- Levels below the copy's top that fit under p_max_depth.
    budget := p_max_depth - cardinality(p_dst_parent) - 1;
    -- Twice: first a count walked only as far as the bounds (at most p_max_nodes + 1
    -- rows, budget + 1 levels), before any write; then the copy, checked on what it
    -- inserted. One check after each, so the limits are worded once.
    FOR phase IN 1..2 LOOP
        IF phase = 1 THEN
            SELECT e.walked, e.height INTO got, height
            FROM pathkeeper_subtree_extent(p_ns, r.id, budget, p_max_nodes + 1) AS e;
        ELSE
            got := 0;
            height := 0;
            FOR c IN
                WITH RECURSIVE sub(id, new_id, new_parent, new_name, kind, content,
                                   metadata, new_path, depth) AS (
                    SELECT x.id, gen_random_uuid(), dst, top_name, x.kind, x.content,
                           x.metadata, top_path, 0
                    FROM nodes x WHERE x.namespace = p_ns AND x.id = r.id
                  UNION ALL
                    SELECT x.id, gen_random_uuid(), s.new_id, x.name, x.kind, x.content,
                           x.metadata, s.new_path || '/' || x.name, s.depth + 1
                    FROM sub s JOIN nodes x ON x.namespace = p_ns AND x.parent_id = s.id
                    WHERE s.kind = 'dir'
                ), ins AS (
                    INSERT INTO nodes AS x
                        (namespace, id, parent_id, name, kind, content, metadata)
                    SELECT p_ns, s.new_id, s.new_parent, s.new_name, s.kind, s.content,
                           s.metadata
                    FROM sub s
                    RETURNING x.id, x.parent_id, x.name, x.kind, x.version, x.content,
                              x.metadata, x.created_at, x.updated_at
                )
                SELECT i.*, s.new_path, s.depth
                FROM ins i JOIN sub s ON s.new_id = i.id
                ORDER BY s.depth, s.new_path COLLATE "C"
            LOOP
                got := got + 1;
                height := greatest(height, c.depth);
                id := c.id; parent_id := c.parent_id; name := c.name; kind := c.kind;
                version := c.version; content := c.content; metadata := c.metadata;
                created_at := c.created_at; updated_at := c.updated_at;
                path := c.new_path;
                RETURN NEXT;
            END LOOP;
        END IF;
        IF got > p_max_nodes THEN
            RAISE EXCEPTION USING ERRCODE = 'PK008', MESSAGE = format(
                'copying %s would create more than %s nodes (at most %s are copied in '
                'one transaction)', target.path, p_max_nodes, p_max_nodes);
        END IF;
        PERFORM pathkeeper_check_depth(format('copying to %s', top_path), height, budget,
                                       p_max_depth);
    END LOOP;
END
$fn$;

"""

#: ``fn_subtree_extent.sql`` as 0018 left it.
_SUBTREE_EXTENT_0018 = r"""
CREATE OR REPLACE FUNCTION pathkeeper_subtree_extent(
    p_ns text, p_id uuid, p_levels integer, p_rows integer
) RETURNS TABLE (walked bigint, height integer) LANGUAGE sql STABLE AS $fn$
    WITH RECURSIVE sub(id, kind, depth) AS (
        SELECT x.id, x.kind, 0 FROM nodes x
        WHERE x.namespace = p_ns AND x.id = p_id
      UNION ALL
        SELECT x.id, x.kind, s.depth + 1
        FROM sub s JOIN nodes x ON x.namespace = p_ns AND x.parent_id = s.id
        WHERE s.kind = 'dir' AND s.depth <= p_levels
    )
    SELECT count(*), max(b.depth) FROM (SELECT s.depth FROM sub s LIMIT p_rows) AS b
$fn$;
"""


#: ``fn_move.sql`` as 0018 left it.
_MOVE_0018 = r"""
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
                SELECT e.height INTO height
                FROM pathkeeper_subtree_extent(p_ns, r.id, budget, NULL) AS e;
                PERFORM pathkeeper_check_depth(format('moving to %s', path), height,
                                               budget, p_max_depth);
            END IF;
        END IF;
        PERFORM pathkeeper_check_name_free(p_ns, dst, p_name, path);
        -- (namespace, id) also as a row comparison: see pathkeeper_lock.
        UPDATE nodes x SET parent_id = dst, name = p_name, version = x.version + 1,
                           updated_at = now()
        WHERE x.namespace = p_ns AND x.id = r.id AND (x.namespace, x.id) >= (p_ns, r.id)
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
    install(op.execute)


def downgrade() -> None:
    for body in (_DELETE_0018, _COPY_0018, _SUBTREE_EXTENT_0018, _MOVE_0018):
        op.execute(body)
