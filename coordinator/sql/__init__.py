"""SQL kept as files: each server-side function and each long query lives in one
``.sql`` file of this folder and is loaded by name, so the text a reader opens is the
text PostgreSQL runs, and a change to a rule has one place to go."""

from functools import cache
from importlib.resources import files

from ..errors import CoordinatorError


class UnknownSQL(CoordinatorError, LookupError):
    """No ``.sql`` file of that name ships with the package."""


@cache
def load(name: str) -> str:
    """The text of ``<name>.sql`` from this folder (read once per process)."""
    resource = files(__name__).joinpath(f"{name}.sql")
    if not resource.is_file():
        raise UnknownSQL(f"no SQL file {name}.sql in {__name__}")
    return resource.read_text(encoding="utf-8")


#: The current schema of each kind of database, as the files that build it, in order. A
#: table both kinds hold (the API keys) is written once, in a file of its own.
SCHEMAS: dict[str, tuple[str, ...]] = {
    "server": ("schema", "api_keys_table"),
    "directory": ("directory_schema", "api_keys_table"),
}


def schema(kind: str) -> str:
    """The tables (and their triggers) of a ``kind`` database (``SCHEMAS``) as they stand:
    what its migrations build, checked by the schema tests."""
    return "\n".join(load(name) for name in SCHEMAS[kind])
