CREATE TEMP TABLE pk_import_stage (
    line bigint NOT NULL,
    path text COLLATE "C" NOT NULL,
    parent_path text COLLATE "C" NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    content text,
    metadata jsonb NOT NULL,
    depth integer NOT NULL,
    implied boolean NOT NULL DEFAULT false,
    seq bigint  -- numbers a missing parent's id (a line's is its line number)
) ON COMMIT DROP
