-- pathkeeper_freeze_namespace: stop the namespace's writes on this server, for a move
-- (docs/sharding.md, section 3, step 3), and return L_s, the sequence's last_value once
-- every writer of the namespace in flight has ended. The fence lock EXCLUSIVE waits for
-- them (each holds it shared from pathkeeper_check_placed to its end) and keeps new ones
-- out until this transaction commits; they then read 'frozen' and get PK009. So every
-- position the namespace ever got here is a block base <= L_s, plus at most 65535:
-- frozen_at. Run again on a frozen namespace (a move resumed), it changes nothing and
-- returns the L_s of the first freeze (two freezes of one namespace are serialised by the
-- lock). A namespace that is not this server's (gone,
-- incoming) is PK010.
CREATE OR REPLACE FUNCTION pathkeeper_freeze_namespace(p_ns text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    st text;
    was bigint;
    l_s bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1347110469,
        CAST(hashtext(p_ns)::bigint & 2147483647 AS integer));
    SELECT p.state, p.frozen_at INTO st, was FROM namespace_placement p
    WHERE p.namespace = p_ns;
    IF st = 'frozen' THEN
        RETURN was - 65535;
    ELSIF st IN ('gone', 'incoming') THEN
        RAISE EXCEPTION USING ERRCODE = 'PK010',
            MESSAGE = format('namespace %s is not on this server', p_ns);
    END IF;
    SELECT s.last_value INTO l_s FROM event_position_seq s;
    INSERT INTO namespace_placement AS p (namespace, state, frozen_at)
    VALUES (p_ns, 'frozen', l_s + 65535)
    ON CONFLICT (namespace) DO UPDATE
        SET state = 'frozen', frozen_at = EXCLUDED.frozen_at, updated_at = now();
    RETURN l_s;
END
$fn$;
