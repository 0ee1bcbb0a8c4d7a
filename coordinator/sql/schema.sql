-- The current schema of a server, in one place with api_keys_table.sql: every table,
-- sequence, constraint and index the migrations build, as they stand at the head revision
-- (the functions are the fn_*.sql files of this folder). It is a description to read and to diff against, not a way
-- to create a database: databases are made and upgraded by the migrations
-- (migrations/versions/), and tests/test_schema_files.py applies this file to a fresh
-- database and compares its catalog with a migrated one's. A migration that changes a
-- table changes this file in the same commit.

-- Namespaces and their trees. A node's path is computed from parent_id and name; a
-- node's parent is a directory of the same namespace (the foreign key carries
-- parent_kind, always 'dir', against the parent's kind).
CREATE TABLE namespaces (
    name varchar(128) NOT NULL,
    root_id uuid NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_namespaces PRIMARY KEY (name)
);

CREATE TABLE nodes (
    namespace varchar(128) NOT NULL,
    id uuid NOT NULL,
    parent_id uuid,
    parent_kind varchar(4) DEFAULT 'dir' NOT NULL,
    name text NOT NULL,
    kind varchar(4) NOT NULL,
    -- lz4: a file's content is compressed as it is stored, several times faster than
    -- pglz for about the same size (migration 0020; so are the payload and the snapshot's).
    content text COMPRESSION lz4,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    version bigint DEFAULT '1' NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_nodes PRIMARY KEY (namespace, id),
    CONSTRAINT uq_nodes_namespace_id_kind UNIQUE (namespace, id, kind),
    CONSTRAINT uq_nodes_namespace_parent_name UNIQUE (namespace, parent_id, name),
    CONSTRAINT fk_nodes_namespace FOREIGN KEY (namespace)
        REFERENCES namespaces (name) ON DELETE CASCADE,
    CONSTRAINT fk_nodes_parent_is_dir FOREIGN KEY (namespace, parent_id, parent_kind)
        REFERENCES nodes (namespace, id, kind),
    -- The same rule as coordinator/paths.py's validate_name, so a row written by
    -- anything else is held to it too.
    CONSTRAINT ck_nodes_name_valid CHECK (
        ((parent_id IS NULL AND name = '')
         OR (parent_id IS NOT NULL AND name <> '' AND name NOT IN ('.', '..')
             AND strpos(name, '/') = 0 AND octet_length(name) <= 255
             AND name !~ '[\x01-\x1f\x7f-\x9f]'))
        AND name IS NFC NORMALIZED),
    CONSTRAINT ck_nodes_content_only_files CHECK (kind = 'file' OR content IS NULL),
    CONSTRAINT ck_nodes_kind CHECK (kind IN ('file', 'dir')),
    CONSTRAINT ck_nodes_root_is_dir CHECK (parent_id IS NOT NULL OR kind = 'dir'),
    CONSTRAINT ck_nodes_parent_kind CHECK (parent_kind = 'dir'),
    CONSTRAINT ck_nodes_version CHECK (version > 0)
);
-- One root per namespace.
CREATE UNIQUE INDEX uq_nodes_one_root ON nodes (namespace) WHERE parent_id IS NULL;
-- A namespace is a tree of many nodes: ANALYZE stores a thousandth of the rows as the
-- column's number of distinct values, never its own estimate from a sample that holds
-- each namespace once (the roots of tenants just created), which took the column for
-- unique and sent PostgreSQL's foreign-key check of each new node through the whole
-- namespace (migration 0018).
ALTER TABLE nodes ALTER COLUMN namespace SET (n_distinct = -0.001);

-- The event log (and outbox): written in the transaction of the change it records.
-- One value of the sequence per writing transaction: the base of its block of
-- positions (coordinator/event_appender.py). CACHE 1 so values are handed out in order.
CREATE SEQUENCE event_position_seq INCREMENT BY 65536 START WITH 65536 CACHE 1;

CREATE TABLE events (
    namespace varchar(128) NOT NULL,
    position bigint NOT NULL,
    node_id uuid,
    type varchar(32) NOT NULL,
    payload jsonb COMPRESSION lz4 NOT NULL,
    xid bigint DEFAULT (pg_current_xact_id()::text)::bigint NOT NULL,
    committed_at timestamptz DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT pk_events PRIMARY KEY (namespace, position)
);
CREATE INDEX ix_events_position ON events (position);

-- How far each consumer (an indexer) has applied the log, per partition.
CREATE TABLE checkpoints (
    consumer varchar(200) NOT NULL,
    partition integer NOT NULL,
    position bigint DEFAULT '0' NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_checkpoints PRIMARY KEY (consumer, partition)
);

-- Documents the search server rejected for good.
CREATE TABLE dead_letters (
    namespace varchar(128) NOT NULL,
    id bigserial NOT NULL,
    consumer varchar(200) NOT NULL,
    position bigint NOT NULL,
    node_id uuid,
    error text NOT NULL,
    document jsonb,
    created_at timestamptz DEFAULT now() NOT NULL,
    retried_at timestamptz,
    CONSTRAINT pk_dead_letters PRIMARY KEY (namespace, id)
);

-- The HTTP API's keys: api_keys_table.sql (a directory holds the same table). Its
-- idempotency keys:
CREATE TABLE idempotency_keys (
    namespace varchar(128) NOT NULL,
    key varchar(255) NOT NULL,
    request_hash text NOT NULL,
    status integer NOT NULL,
    response jsonb NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT pk_idempotency_keys PRIMARY KEY (namespace, key)
);
CREATE INDEX ix_idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- Snapshots of the folded log and the compaction horizon (indexer/retention.py).
CREATE TABLE log_snapshots (
    id bigserial NOT NULL,
    position bigint NOT NULL,
    taken_at timestamptz DEFAULT now() NOT NULL,
    namespaces integer NOT NULL,
    nodes bigint NOT NULL,
    anomalies integer DEFAULT '0' NOT NULL,
    -- NULL: every namespace; a name: that namespace alone (written by a move).
    namespace varchar(128),
    CONSTRAINT pk_log_snapshots PRIMARY KEY (id)
);
CREATE INDEX ix_log_snapshots_position ON log_snapshots (position);

CREATE TABLE log_snapshot_nodes (
    snapshot_id bigint NOT NULL,
    namespace varchar(128) NOT NULL,
    id uuid NOT NULL,
    parent_id uuid,
    name text NOT NULL,
    kind varchar(4) NOT NULL,
    content text COMPRESSION lz4,
    metadata jsonb NOT NULL,
    version bigint NOT NULL,
    CONSTRAINT pk_log_snapshot_nodes PRIMARY KEY (snapshot_id, namespace, id),
    CONSTRAINT fk_log_snapshot_nodes_snapshot FOREIGN KEY (snapshot_id)
        REFERENCES log_snapshots (id) ON DELETE CASCADE
);
CREATE INDEX ix_log_snapshot_nodes_roots ON log_snapshot_nodes (snapshot_id, namespace)
    WHERE parent_id IS NULL;

CREATE TABLE log_horizon (
    id integer NOT NULL,
    position bigint NOT NULL,
    snapshot_id bigint NOT NULL,
    compacted_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_log_horizon PRIMARY KEY (id),
    CONSTRAINT ck_log_horizon_single_row CHECK (id = 1)
);

-- Whether this server owns each namespace now (docs/sharding.md); no row: active.
CREATE TABLE namespace_placement (
    namespace varchar(128) NOT NULL,
    state varchar(8) NOT NULL,
    log_from bigint DEFAULT '0' NOT NULL,
    frozen_at bigint,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_namespace_placement PRIMARY KEY (namespace),
    CONSTRAINT ck_namespace_placement_state
        CHECK (state IN ('incoming', 'active', 'frozen', 'gone'))
);

-- Locks that only roles granted our schema can take (migration 0010 has the argument):
-- two empty tables in a schema on which PUBLIC has no privilege.
CREATE SCHEMA pathkeeper_locks;
REVOKE ALL ON SCHEMA pathkeeper_locks FROM PUBLIC;
CREATE TABLE pathkeeper_locks.position_lock ();
CREATE TABLE pathkeeper_locks.snapshot_lock ();
COMMENT ON TABLE pathkeeper_locks.position_lock IS
    'Never holds rows. Writers of the event log hold ROW SHARE on it from before they take '
    'a block of positions until they end; log readers wait for its holders.';
COMMENT ON TABLE pathkeeper_locks.snapshot_lock IS
    'Never holds rows. The scheduled snapshot holds EXCLUSIVE on it while it runs.';
