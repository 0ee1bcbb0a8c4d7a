-- pathkeeper_check_version: the optimistic-concurrency rule, once. A change that names
-- the version it expects (p_if_version, NULL: any) is refused with PK004 (a conflict)
-- unless the node, locked by the caller, is still at that version.
CREATE OR REPLACE FUNCTION pathkeeper_check_version(p_version bigint, p_if_version bigint)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_if_version IS NOT NULL AND p_version <> p_if_version THEN
        RAISE EXCEPTION USING ERRCODE = 'PK004',
            MESSAGE = format('version is %s, expected %s', p_version, p_if_version);
    END IF;
END
$fn$;
