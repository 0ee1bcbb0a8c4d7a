-- The HTTP API's keys (hashes only). One definition for both kinds of database: a
-- server alone holds its keys; with several servers the directory holds them (a key may
-- name namespaces of several servers) and the servers' own tables stay empty.
CREATE TABLE api_keys (
    id uuid NOT NULL,
    key_hash text NOT NULL,
    namespaces text[] NOT NULL,
    scope varchar(8) NOT NULL,
    label text DEFAULT '' NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    revoked_at timestamptz,
    CONSTRAINT pk_api_keys PRIMARY KEY (id),
    CONSTRAINT uq_api_keys_key_hash UNIQUE (key_hash),
    CONSTRAINT ck_api_keys_scope CHECK (scope IN ('read', 'write', 'admin'))
);
