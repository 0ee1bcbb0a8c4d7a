"""pathkeeper_rename returns one row: say so to the planner

Revision ID: 0005_rename_function_rows
Revises: 0004_rename_function
Create Date: 2026-11-23 21:30:00

A set-returning function is estimated at 1,000 rows unless declared. With that
estimate, the generic plan of the lone rename's statement (``coordinator/
single_statement.py``: the call, the claim and the event insert) looks dearer than a
plan for its values, so PostgreSQL's plan cache planned that statement again on every
execution: about a fifth of a rename's server CPU. Declared as the one row it returns,
the statement is planned once per connection and its generic plan reused.
"""

from __future__ import annotations

from alembic import op

revision = "0005_rename_function_rows"
down_revision = "0004_rename_function"
branch_labels = None
depends_on = None

SIGNATURE = "pathkeeper_rename(text, text, text[], uuid, text, bigint)"


def upgrade() -> None:
    op.execute(f"ALTER FUNCTION {SIGNATURE} ROWS 1")


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {SIGNATURE} ROWS 1000")
