-- pathkeeper_copy: a copy's whole rule in one call: a file, or a directory with its
-- whole subtree, under the directory p_dst_parent as p_name (NULL: the source's name),
-- with new ids. Lock the source FOR NO KEY UPDATE (pathkeeper_lock: a rename, move,
-- delete or write of it waits, a create under it does not); refuse the root (PK003)
-- and a stale version (pathkeeper_check_version); the destination directory
-- (pathkeeper_walk_path); a directory copied into itself or its own subtree (PK003,
-- from the destination's ancestor ids); a free name (pathkeeper_check_name_free); the
-- bounds, before any write and counted only as far as they reach: at most p_max_nodes
-- nodes (PK008) and no node deeper than p_max_depth (pathkeeper_subtree_extent,
-- pathkeeper_check_depth: the move's walk and wording); then
-- one statement reads the subtree (one snapshot, so the copy is the subtree as it was
-- at one moment, whatever commits meanwhile) and inserts the copies, and the bounds
-- are checked again on what it inserted (a create under the source that committed
-- between the count and the insert is copied too, and refused if it crosses a bound).
-- Answers the new nodes with their paths, each parent before its children (the
-- caller's one 'created' event per row keeps that order). A sibling committed after
-- the name check is the unique constraint's violation and a destination deleted
-- after the walk the foreign key's, worded by the caller from the path it knows.
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
        -- Read as pathkeeper_move reads them.
        IF EXISTS (
            WITH RECURSIVE up(namespace, id, parent_id, depth) AS (
                SELECT x.namespace, x.id, x.parent_id, 0 FROM nodes x
                WHERE x.namespace = p_ns AND x.id = dst AND (x.namespace, x.id) >= (p_ns, dst)
              UNION ALL
                SELECT x.namespace, x.id, x.parent_id, u.depth + 1
                FROM up u JOIN nodes x ON x.namespace = u.namespace AND x.id = u.parent_id
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
                -- The start names (namespace, id) also as a row comparison and each
                -- step the namespace by the parent row's column: see
                -- coordinator/subtree.py.
                WITH RECURSIVE sub(namespace, id, new_id, new_parent, new_name, kind,
                                   content, metadata, new_path, depth) AS (
                    SELECT x.namespace, x.id, gen_random_uuid(), dst, top_name, x.kind,
                           x.content, x.metadata, top_path, 0
                    FROM nodes x
                    WHERE x.namespace = p_ns AND x.id = r.id
                      AND (x.namespace, x.id) >= (p_ns, r.id)
                  UNION ALL
                    SELECT x.namespace, x.id, gen_random_uuid(), s.new_id, x.name, x.kind,
                           x.content, x.metadata, s.new_path || '/' || x.name, s.depth + 1
                    FROM sub s JOIN nodes x ON x.namespace = s.namespace AND x.parent_id = s.id
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

