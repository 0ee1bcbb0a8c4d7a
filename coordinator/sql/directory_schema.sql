-- The directory database's schema as it stands (migrations_directory/ builds it; a test
-- checks they agree). Where each namespace lives, which servers there are, the moves in
-- flight, and the HTTP API's keys (a key may name namespaces of several servers).
-- A shard never holds these tables (docs/sharding.md, section 1).

CREATE TABLE shards (
    name varchar(64) NOT NULL,
    -- The shard's database URL as given, or env:NAME to read it from that variable
    -- when the process starts (so a password need not be stored here).
    url text NOT NULL,
    accepts_new boolean DEFAULT true NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_shards PRIMARY KEY (name),
    CONSTRAINT ck_shards_name CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$')
);

CREATE TABLE placements (
    namespace varchar(128) NOT NULL,
    shard varchar(64) NOT NULL,
    epoch bigint DEFAULT '1' NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_placements PRIMARY KEY (namespace),
    CONSTRAINT fk_placements_shard_shards FOREIGN KEY (shard) REFERENCES shards (name)
);
CREATE INDEX ix_placements_shard ON placements (shard);

CREATE TABLE moves (
    namespace varchar(128) NOT NULL,
    source varchar(64) NOT NULL,
    target varchar(64) NOT NULL,
    step varchar(16) NOT NULL,
    source_last bigint,
    flip_position bigint,
    started_at timestamptz DEFAULT now() NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_moves PRIMARY KEY (namespace),
    CONSTRAINT fk_moves_namespace_placements FOREIGN KEY (namespace)
        REFERENCES placements (namespace),
    CONSTRAINT fk_moves_source_shards FOREIGN KEY (source) REFERENCES shards (name),
    CONSTRAINT fk_moves_target_shards FOREIGN KEY (target) REFERENCES shards (name)
);

-- The HTTP API's keys: api_keys_table.sql, the same table as a server's (with a directory
-- the keys live here, since a key's namespaces may be on several servers).

-- Every change of a placement (a flip, a drop, a hand edit) tells the processes that
-- cache it, so a move is seen in milliseconds: NOTIFY is sent at COMMIT, never for a
-- change that rolled back. The payload is the namespace.
CREATE OR REPLACE FUNCTION pathkeeper_placement_changed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('pathkeeper_placements', OLD.namespace);
    RETURN NULL;
END $fn$;
CREATE TRIGGER tr_placements_changed AFTER UPDATE OR DELETE ON placements
    FOR EACH ROW EXECUTE FUNCTION pathkeeper_placement_changed();
