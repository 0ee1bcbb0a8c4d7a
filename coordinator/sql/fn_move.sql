-- pathkeeper_move: a move's whole rule in one call, so a lone move is one statement
-- (coordinator/single_statement.py): lock the node (pathkeeper_lock); refuse the root
-- (PK003) and a stale version (pathkeeper_check_version); the destination directory
-- (pathkeeper_walk_path, a snapshot of its own, after the lock); a directory that
-- changes parent takes FOR KEY SHARE on every ancestor of its destination, in id order,
-- re-reading the chain until it holds all of them, and refuses a destination inside
-- itself; if that takes it deeper, the levels of its subtree that fit under
-- p_max_depth (pathkeeper_subtree_extent, pathkeeper_check_depth); a free name
-- (pathkeeper_check_name_free); the update. A destination
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
    ancestor uuid;
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
                -- The walk up names the namespace by the row's column (see
                -- coordinator/subtree.py), its start and the locks (namespace, id) also
                -- as a row comparison (see pathkeeper_lock): by p_ns alone, with
                -- statistics that saw the namespace empty, each read scanned it.
                WITH RECURSIVE up(namespace, id, parent_id, depth) AS (
                    SELECT x.namespace, x.id, x.parent_id, 0
                    FROM nodes x WHERE x.namespace = p_ns AND x.id = dst
                                   AND (x.namespace, x.id) >= (p_ns, dst)
                  UNION ALL
                    SELECT x.namespace, x.id, x.parent_id, u.depth + 1
                    FROM up u JOIN nodes x ON x.namespace = u.namespace AND x.id = u.parent_id
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
                -- One probe per ancestor, in id order.
                FOREACH ancestor IN ARRAY missing LOOP
                    PERFORM FROM nodes x
                    WHERE x.namespace = p_ns AND x.id = ancestor
                      AND (x.namespace, x.id) >= (p_ns, ancestor)
                    FOR KEY SHARE;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE =
                            'the destination changed while its ancestors were locked';
                    END IF;
                END LOOP;
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
