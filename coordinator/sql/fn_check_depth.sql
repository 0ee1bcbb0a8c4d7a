-- pathkeeper_check_depth: the depth limit's refusal (PK003), one wording for every
-- command that puts a subtree somewhere: p_doing says what ('moving to /a/b',
-- 'copying to /a/b'), p_height how many levels the subtree has below its top (as far
-- as pathkeeper_subtree_extent walked, or as a copy inserted), p_budget how many fit
-- there under p_max_depth.
CREATE OR REPLACE FUNCTION pathkeeper_check_depth(
    p_doing text, p_height integer, p_budget integer, p_max_depth integer
) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_height IS NOT NULL AND p_height > p_budget THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = format(
            '%s would put nodes deeper than %s levels (the directory has at least %s '
            'levels below it; at most %s fit there)',
            p_doing, p_max_depth, p_height, p_budget);
    END IF;
END
$fn$;
