-- pathkeeper_lock: the node a mutation names, locked, and its path: the one
-- lock-and-re-resolve of every pathkeeper_* function that changes a node. p_key: FOR
-- UPDATE (a change of the row's key: rename, move, delete); else FOR NO KEY UPDATE (a
-- write or metadata: creates under the node go on).
--   by id (p_id): lock the row, then its path from its ancestors; PK001 no node with id.
--   by path (p_parts): resolve and lock, then resolve again in a statement (so, in READ
--   COMMITTED, a snapshot) of its own, which sees the commits the lock waited for: the
--   path must still lead to the row that was locked, else try again; the path's errors
--   are pathkeeper_walk_path's; PK004 if it kept changing for five tries.
-- Callers assign it (target := pathkeeper_lock(...)): a plain expression, which skips
-- the function scan of SELECT ... FROM pathkeeper_lock(...) (measured: about 10 us of
-- backend CPU per write or move).
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
