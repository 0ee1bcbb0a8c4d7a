"""Run the Alembic migrations from code (CLI, tests, demo)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from .db import UPGRADE_HINT, parse_database_url, translate
from .errors import InvalidConfiguration, NotMigrated

_HERE = Path(__file__).resolve().parent


#: The shards' migrations, and the directory database's (docs/sharding.md, section 1):
#: two histories, each with its own version table.
SHARD = "migrations"
DIRECTORY = "migrations_directory"
#: The directory's version table (migrations_directory/env.py).
DIRECTORY_VERSION_TABLE = "directory_version"


def migrations_dir(folder: str = SHARD) -> Path:
    """Where the migrations are: inside the package in an installed wheel
    (``coordinator/migrations``, see pyproject.toml), at the top of a checkout otherwise."""
    shipped = _HERE / folder
    return shipped if (shipped / "env.py").is_file() else _HERE.parent / folder


def alembic_config(database_url: str, folder: str = SHARD) -> Config:
    # Built in code, not read from alembic.ini: a wheel has no alembic.ini, and the
    # environment (migrations/env.py) configures no logging from it.
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir(folder)))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    parse_database_url(database_url)
    command.upgrade(alembic_config(database_url), revision)


def upgrade_directory(directory_url: str, revision: str = "head") -> None:
    """Migrate the directory database (its own history, ``migrations_directory/``)."""
    parse_database_url(directory_url)
    command.upgrade(alembic_config(directory_url, DIRECTORY), revision)


def downgrade(database_url: str, revision: str) -> None:
    parse_database_url(database_url)
    command.downgrade(alembic_config(database_url), revision)


@dataclass(frozen=True)
class Revision:
    """One migration: its id, the one before it, its title, and whether a database is at it."""

    revision: str
    down_revision: str | None
    title: str
    current: bool = False


def _script(folder: str = SHARD) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("postgresql://", folder))


def history(current: str | None = None) -> list[Revision]:
    """Every migration, oldest first; ``current`` marks the one a database is at."""
    revisions = list(_script().walk_revisions())  # newest first
    return [
        Revision(rev.revision, _one(rev.down_revision), rev.doc.strip().splitlines()[0]
                 if rev.doc else "", rev.revision == current)
        for rev in reversed(revisions)
    ]


def _one(down: str | Sequence[str] | None) -> str | None:
    if down is not None and not isinstance(down, str):
        return ",".join(down)
    return down


def current_revision(engine: Engine, table: str = "alembic_version") -> str | None:
    """The revision a database is at (``table``: its version table, a directory's is
    ``DIRECTORY_VERSION_TABLE``); None when it was never migrated."""
    try:
        with engine.connect() as conn:
            exists = conn.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar()
            if exists is None:
                return None
            version = conn.execute(text(f"SELECT version_num FROM {table}")).scalar()
    except DBAPIError as exc:
        raise translate(exc) from exc
    return str(version) if version is not None else None


def head_revision(folder: str = SHARD) -> str:
    head = _script(folder).get_current_head()
    assert head is not None
    return head


def require_current(engine: Engine) -> None:
    """Raise ``NotMigrated`` unless the database is at this code's head revision, so a
    long-running process says so at start instead of failing on every statement."""
    version = current_revision(engine)
    head = head_revision()
    if version == head:
        return
    known = {rev.revision for rev in _script().walk_revisions()}
    if version is not None and version not in known:
        raise InvalidConfiguration(
            f"the database schema is at revision {version}, unknown to this version of "
            "Pathkeeper (is the database newer than the code?)"
        )
    raise NotMigrated(
        f"the database schema is at revision {version or 'none'}, this code needs {head}: "
        f"{UPGRADE_HINT}"
    )
