"""The server-side functions, each in one ``fn_*.sql`` file of this folder, and how
migrations install them.

The files are the current functions (one function each; ``FUNCTIONS`` reads the
folder, so a new function is a new file); the database's history is the migrations. The two
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
import re
from collections.abc import Callable
from importlib.resources import files

from . import UnknownSQL, load

_DEFINES = re.compile(r"CREATE OR REPLACE FUNCTION ([\w.]+)\s*\(")
_CALLS = re.compile(r"([\w.]+)\s*\(")
_COMMENT = re.compile(r"--[^\n]*")


def _in_dependency_order() -> tuple[str, ...]:
    """Every ``fn_*.sql`` file of this folder, each after the files whose functions it
    calls (read from its text, comments left out), ties in name order: the same order
    every time, and a new function is a new file and nothing else."""
    names = sorted(p.name.removesuffix(".sql") for p in files(__package__).iterdir()
                   if p.name.startswith("fn_") and p.name.endswith(".sql"))
    defined: dict[str, str] = {}
    for name in names:
        found = _DEFINES.findall(load(name))
        if len(found) != 1:
            raise UnknownSQL(f"{name}.sql must define exactly one function, not {found}")
        defined[found[0]] = name
    needs = {name: {defined[f] for f in _CALLS.findall(_COMMENT.sub("", load(name)))
                    if f in defined and defined[f] != name}
             for name in names}
    order: list[str] = []
    while len(order) < len(names):
        ready = [n for n in names if n not in order and needs[n] <= set(order)]
        if not ready:
            raise UnknownSQL("function files that call each other in a circle: "
                             + ", ".join(n for n in names if n not in order))
        order.append(ready[0])
    return tuple(order)


#: Every server-side function's file, helpers before their callers (plpgsql resolves
#: calls at run time, so the order keeps a reader's path short and the digest stable).
FUNCTIONS: tuple[str, ...] = _in_dependency_order()


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
