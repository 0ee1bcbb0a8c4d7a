"""The server-side functions, each in one ``fn_*.sql`` file of this folder, and how
migrations install them.

The files are the current functions; the database's history is the migrations. The two
meet like this:

- Migrations up to 0010 carry frozen copies of the functions as they were then (Python
  strings). They stay as written: a migration that loaded today's file would change
  what an old revision means, and a downgrade to it could not bring its body back.
- From 0011 on, a migration that changes a function changes its file and calls
  ``install``, which runs every file of ``FUNCTIONS`` (each ``CREATE OR REPLACE``). So
  such a migration means "the functions as the files say", and on a fresh database
  every one of them lays down the same, current bodies: the head is the files. Keep a
  function's signature and return type when changing its body (``CREATE OR REPLACE``
  cannot change them); a change of either is a new name, or a migration that drops the
  old signature before ``install``. A migration that needs the previous body for its
  downgrade freezes that body in itself (as 0011's downgrade reuses the frozen copies of
  0004-0009).
- A database already at the head never runs an old migration again, so a file changed
  without a new migration would reach fresh databases (and the tests) but never the
  deployed ones. Each migration that calls ``install`` therefore names the ``digest``
  of the files it was written for (``FUNCTIONS_DIGEST``), and
  ``tests/test_schema_files.py`` fails unless the newest one names the files' digest as
  they are now: changing a file means adding the migration that installs it. The same
  test migrates a fresh database and compares every function with a database built
  from these files (and every table with ``schema.sql``), so a migration that changes a
  function past its file, or a function with no file, fails there too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from . import load

#: Every server-side function's file, helpers before their callers (plpgsql resolves
#: calls at run time, so the order only keeps a reader's path short).
FUNCTIONS: tuple[str, ...] = (
    "fn_resolve",
    "fn_walk_path",
    "fn_check_version",
    "fn_check_name_free",
    "fn_lock",
    "fn_create",
    "fn_rename",
    "fn_move",
    "fn_delete",
    "fn_write",
    "fn_set_metadata",
    "fn_copy",
    "fn_take_position_lock",
)


def install(execute: Callable[[str], object]) -> None:
    """Create or replace every function of ``FUNCTIONS`` with ``execute`` (a migration's
    ``op.execute``, or a connection's)."""
    for name in FUNCTIONS:
        execute(load(name))


def digest() -> str:
    """A digest of every file of ``FUNCTIONS`` (names and text), as a migration that
    installs them names it."""
    h = hashlib.sha256()
    for name in FUNCTIONS:
        h.update(f"{name}\0{load(name)}\0".encode())
    return h.hexdigest()[:16]
