-- pathkeeper_check_placed: refuse a write of a namespace this server does not own now
-- (docs/sharding.md, "The fence"). Every writer calls it before it may write: first
-- thing in pathkeeper_lock and pathkeeper_create, and in the claiming statement of the
-- event log (coordinator/event_appender.py), which every transaction that writes runs.
-- It takes the namespace's fence lock SHARED, held to the end of the transaction: the
-- freeze (pathkeeper_freeze_namespace) takes it EXCLUSIVE, so the freeze waits for every
-- writer of the namespace in flight and a writer that comes after waits for the freeze
-- to commit. The row is read after the lock was granted, by a statement of this
-- (volatile) function, so in READ COMMITTED by a snapshot of its own, which sees that
-- commit: no writer passes the check and commits after the freeze. Keys: class 0x504B4645
-- ("PKFE"), the namespace's hash as the import mark and the partitions take it. An
-- outsider who takes the key exclusive only blocks that namespace's writes; taking it
-- shared lets nothing through, since the row decides. No row: 'active' (a server that
-- never took part in a move has none).
--   PK009 frozen (being moved away: retry in a moment); PK010 gone or incoming (not this
--   server's: the shard map was stale).
CREATE OR REPLACE FUNCTION pathkeeper_check_placed(p_ns text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    st text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1347110469,
        CAST(hashtext(p_ns)::bigint & 2147483647 AS integer));
    SELECT p.state INTO st FROM namespace_placement p WHERE p.namespace = p_ns;
    IF st = 'frozen' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK009',
            MESSAGE = format('namespace %s is being moved to another server; retry in a moment',
                             p_ns);
    ELSIF st IN ('gone', 'incoming') THEN
        RAISE EXCEPTION USING ERRCODE = 'PK010',
            MESSAGE = format('namespace %s is not on this server', p_ns);
    END IF;
END
$fn$;
