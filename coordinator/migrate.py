"""Run the Alembic migrations from code (CLI, tests, demo)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from .db import UPGRADE_HINT, parse_database_url, translate
from .errors import InvalidConfiguration, NotMigrated

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(database_url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    parse_database_url(database_url)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    parse_database_url(database_url)
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()
    assert head is not None
    return head


def require_current(engine: Engine) -> None:
    """Raise ``NotMigrated`` unless the database is at this code's head revision, so a
    long-running process says so at start instead of failing on every statement."""
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError as exc:
        raise translate(exc) from exc
    head = head_revision()
    if version == head:
        return
    script = ScriptDirectory.from_config(alembic_config("postgresql://"))
    known = {rev.revision for rev in script.walk_revisions()}
    if version is not None and version not in known:
        raise InvalidConfiguration(
            f"the database schema is at revision {version}, unknown to this version of "
            "Pathkeeper (is the database newer than the code?)"
        )
    raise NotMigrated(
        f"the database schema is at revision {version or 'none'}, this code needs {head}: "
        f"{UPGRADE_HINT}"
    )
