-- pathkeeper_unfreeze_namespace: undo pathkeeper_freeze_namespace (a move aborted before
-- its flip): the namespace takes writes here again. Only a frozen row is deleted (no row
-- is 'active'); true if there was one. Writers that were refused meanwhile retry.
CREATE OR REPLACE FUNCTION pathkeeper_unfreeze_namespace(p_ns text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    DELETE FROM namespace_placement p WHERE p.namespace = p_ns AND p.state = 'frozen';
    RETURN FOUND;
END
$fn$;
