"""server-side functions from coordinator/sql files, with shared helpers; NFC names

Revision ID: 0011_functions_from_files
Revises: 0010_position_lock_tables
Create Date: 2026-11-26 10:30:00

Every server-side function is re-created from its file in ``coordinator/sql``
(``coordinator.sql.functions.install``; how migrations and files relate is argued
there). The files share helpers, so each rule exists once in the server:
``pathkeeper_walk_path`` (a path to a node id, with the path's errors),
``pathkeeper_check_version`` (the expected-version check), ``pathkeeper_check_name_free``
(a taken name, worded with its full path, now also for a create), and
``pathkeeper_lock`` (lock and re-resolve, which the rename now calls instead of its own
copy). Signatures, return types and SQLSTATEs are unchanged.

The names' CHECK constraint also requires NFC (``name IS NFC NORMALIZED``, which needs a
UTF8 database): the coordinator always stored names NFC-normalized, now the database
refuses any other spelling, whoever writes the row. A database holding a name that is
not NFC is refused with the count and an example, before anything changes.

Downgrade: the helpers are dropped and the frozen bodies of 0004-0009 re-created by
those migrations' own code.
"""

from __future__ import annotations

from alembic import context, op

from coordinator.sql.functions import install

revision = "0011_functions_from_files"
down_revision = "0010_position_lock_tables"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "4dc9b58c65c32cdc"

#: Migration 0001's rule, as it was.
_NAME_RULE = (
    "(parent_id IS NULL AND name = '') OR (parent_id IS NOT NULL AND name <> '' "
    "AND name NOT IN ('.', '..') AND strpos(name, '/') = 0 "
    "AND octet_length(name) <= 255 AND name !~ '[\\x01-\\x1f\\x7f-\\x9f]')"
)

_CHECK_NAMES_ARE_NFC = r"""
DO $do$
DECLARE
    bad bigint;
    example text;
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'pathkeeper needs a UTF8 database (this one is %)',
            pg_catalog.getdatabaseencoding();
    END IF;
    SELECT count(*), min(namespace || ': ' || name) INTO bad, example
    FROM nodes WHERE name IS NOT NFC NORMALIZED;
    IF bad > 0 THEN
        RAISE EXCEPTION '% node names are not NFC-normalized (e.g. %); rename them first',
            bad, example;
    END IF;
END
$do$;
"""

#: The functions whose bodies this revision replaces, by their frozen migrations.
_FROZEN = (
    "0004_rename_function", "0005_rename_function_rows", "0006_create_function",
    "0007_delete_function", "0008_move_function", "0009_write_functions",
)
_REPLACED = (
    "pathkeeper_set_metadata(text, text, text[], uuid, jsonb, bigint)",
    "pathkeeper_write(text, text, text[], uuid, text, jsonb, bigint)",
    "pathkeeper_move(text, text, text[], uuid, text[], text, bigint, integer)",
    "pathkeeper_delete(text, text, text[], uuid, boolean, bigint)",
    "pathkeeper_lock(text, text, text[], uuid, boolean)",
    "pathkeeper_create(text, text[], uuid, text, text, text, jsonb)",
    "pathkeeper_rename(text, text, text[], uuid, text, bigint)",
    "pathkeeper_resolve(text, text[])",
)
_HELPERS = (
    "pathkeeper_walk_path(text, text[], boolean)",
    "pathkeeper_check_version(bigint, bigint)",
    "pathkeeper_check_name_free(text, uuid, text, text)",
)


def upgrade() -> None:
    op.execute(_CHECK_NAMES_ARE_NFC)
    op.execute("ALTER TABLE nodes DROP CONSTRAINT ck_nodes_name_valid")
    op.execute(
        "ALTER TABLE nodes ADD CONSTRAINT ck_nodes_name_valid "
        f"CHECK (({_NAME_RULE}) AND name IS NFC NORMALIZED)"
    )
    install(op.execute)


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP CONSTRAINT ck_nodes_name_valid")
    op.execute(f"ALTER TABLE nodes ADD CONSTRAINT ck_nodes_name_valid CHECK ({_NAME_RULE})")
    for signature in (*_REPLACED, *_HELPERS):
        op.execute(f"DROP FUNCTION {signature}")
    script = context.script
    for rev in _FROZEN:
        module = script.get_revision(rev).module  # type: ignore[union-attr]
        module.upgrade()
