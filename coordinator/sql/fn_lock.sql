-- pathkeeper_lock: the node a mutation names, locked, and its path: the one
-- lock-and-re-resolve of every pathkeeper_* function that changes a node. p_key: FOR
-- UPDATE (a change of the row's key: rename, move, delete); else FOR NO KEY UPDATE (a
-- write or metadata: creates under the node go on).
--   by id (p_id): lock the row, then its path from its ancestors; PK001 no node with id.
--   by path (p_parts): resolve and lock, then resolve again in a statement (so, in READ
--   COMMITTED, a snapshot) of its own, which sees the commits the lock waited for: the
--   path must still lead to the row that was locked, else try again; the path's errors
--   are pathkeeper_walk_path's; PK004 if it kept changing for five tries.
-- By id every read of a row names (namespace, id) twice: as equalities and as a row
-- comparison. Before nodes has statistics (a new database, a namespace filled in a
-- burst, before autovacuum's first analyze) the planner costs a scan of
-- (namespace, parent_id, name) by its namespace alone, then a filter on the id, as
-- cheap as the (namespace, id) index, and took it: every rename by id read its whole
-- namespace, once for the row and once per ancestor (0.6-0.7 ms of server time for a
-- lock in a namespace of 400 nodes, against 0.1 ms by path). The row comparison is an
-- index condition only of an index that starts (namespace, id), a filter on any other,
-- so the cost of the wrong one is no longer a tie; with statistics the same index is
-- chosen anyway. The ancestors' walk starts from the locked row, not a second read of it,
-- and reads each parent from the one before it (LATERAL ... LIMIT 1: a probe per level;
-- as a join, the planner without statistics put nodes on the outer side, a namespace
-- scan per level); one statement, so one snapshot for the whole path.
-- First the fence (pathkeeper_check_placed): a namespace this server does not own now
-- is refused before any row is locked.
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
    PERFORM pathkeeper_check_placed(p_ns);
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
