-- pathkeeper_locks.take_position_lock: LOCK TABLE position_lock IN ROW SHARE MODE
-- (writers never conflict with one another: ROW SHARE conflicts only with EXCLUSIVE and
-- ACCESS EXCLUSIVE), a function so that a writer can take it inside its one claiming
-- statement. It runs with the caller's privileges: only a role that may write our tables
-- can take it; PUBLIC may not call it. The argument is in coordinator/eventlog.py.
CREATE OR REPLACE FUNCTION pathkeeper_locks.take_position_lock() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    LOCK TABLE pathkeeper_locks.position_lock IN ROW SHARE MODE;
    RETURN true;
END
$fn$;
REVOKE ALL ON FUNCTION pathkeeper_locks.take_position_lock() FROM PUBLIC;
