"""pathkeeper_copy: a file or a subtree copied in one call

Revision ID: 0012_copy_function
Revises: 0011_functions_from_files
Create Date: 2026-11-26 11:00:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``), which adds ``pathkeeper_copy``
(``fn_copy.sql``); every other function's body is unchanged.

Downgrade: drops ``pathkeeper_copy``; the other functions stay as 0011 left them.
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0012_copy_function"
down_revision = "0011_functions_from_files"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "fe2e0d36c403c369"


def upgrade() -> None:
    install(op.execute)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION pathkeeper_copy(text, text, text[], uuid, text[], text, bigint, "
        "integer, integer)"
    )
