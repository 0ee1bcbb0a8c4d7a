"""Test-local stand-ins for SQL that lands with other changes (remove at merge).

* ``FENCE_SQL``: ``pathkeeper_check_placed``, ``pathkeeper_freeze_namespace`` and
  ``pathkeeper_unfreeze_namespace`` as docs/sharding.md section 1 and step 3 define them
  (the shard fence's change writes them as ``coordinator/sql/fn_check_placed.sql`` and
  ``fn_freeze_namespace.sql``, migration 0015). Until it lands, the check is called by a
  trigger on ``events``: every writing transaction inserts its events in its one claiming
  statement, where the fence's change calls it too, so the trigger refuses the same
  writes at the same point. (The apply worker of a subscription runs with
  ``session_replication_role = replica``, so the trigger does not fire for copied rows,
  as the real check is never called for them.)
* ``DIRECTORY_SQL``: the directory's tables of docs/sharding.md section 1 (the directory's
  own migrations replace it).
"""

FENCE_SQL = r"""
CREATE OR REPLACE FUNCTION pathkeeper_check_placed(p_ns text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE st text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1347110469,
        CAST(hashtext(p_ns)::bigint & 2147483647 AS integer));
    SELECT state INTO st FROM namespace_placement WHERE namespace = p_ns;
    IF st = 'frozen' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK009',
            MESSAGE = format('namespace %s is being moved', p_ns);
    ELSIF st IN ('gone', 'incoming') THEN
        RAISE EXCEPTION USING ERRCODE = 'PK010',
            MESSAGE = format('namespace %s is not on this server', p_ns);
    END IF;
END $fn$;

CREATE OR REPLACE FUNCTION pathkeeper_freeze_namespace(p_ns text) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE l_s bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1347110469,
        CAST(hashtext(p_ns)::bigint & 2147483647 AS integer));
    SELECT last_value INTO l_s FROM event_position_seq;
    INSERT INTO namespace_placement (namespace, state, frozen_at)
    VALUES (p_ns, 'frozen', l_s + 65535)
    ON CONFLICT (namespace) DO UPDATE
        SET state = 'frozen', frozen_at = EXCLUDED.frozen_at, updated_at = now();
    RETURN l_s;
END $fn$;

CREATE OR REPLACE FUNCTION pathkeeper_unfreeze_namespace(p_ns text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(1347110469,
        CAST(hashtext(p_ns)::bigint & 2147483647 AS integer));
    DELETE FROM namespace_placement WHERE namespace = p_ns AND state = 'frozen';
END $fn$;

CREATE OR REPLACE FUNCTION pk_test_fence_events() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pathkeeper_check_placed(NEW.namespace);
    RETURN NEW;
END $fn$;
CREATE TRIGGER pk_test_fence_events BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION pk_test_fence_events();
"""

DIRECTORY_SQL = """
CREATE TABLE shards (
    name varchar(64) PRIMARY KEY,
    url text NOT NULL,
    accepts_new boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE placements (
    namespace varchar(128) PRIMARY KEY,
    shard varchar(64) NOT NULL REFERENCES shards (name),
    epoch bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE moves (
    namespace varchar(128) PRIMARY KEY REFERENCES placements (namespace),
    source varchar(64) NOT NULL, target varchar(64) NOT NULL,
    step varchar(16) NOT NULL,
    source_last bigint, flip_position bigint,
    started_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now()
);
"""
