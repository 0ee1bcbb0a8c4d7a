"""Every bad input gets its typed error through the Python API, and nothing is written:
the namespace's rows and the whole event log are byte-for-byte unchanged."""

from __future__ import annotations

import json
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from tree_checks import db_state, event_rows

from coordinator import (
    AlreadyExists,
    Coordinator,
    InvalidContent,
    InvalidMove,
    InvalidName,
    InvalidPath,
    IsADirectory,
    NotADirectory,
    NotFound,
)
from pathkeeper.local.postgres import LocalPostgres

# (label, call(coordinator, ids of the fixture tree), expected error). The calls take
# their case's data as default arguments, hence the loose callable type.
Case = tuple[str, Callable[..., Any], type[Exception]]

BAD_NAMES: list[tuple[str, object]] = [
    ("slash", "a/b"),
    ("nul", "a\x00b"),
    ("dot", "."),
    ("dotdot", ".."),
    ("empty", ""),
    ("256 bytes", "x" * 256),
    ("256 bytes of 2-byte chars", "é" * 128),
    ("invalid utf-8", b"\xff\xfe"),
    ("lone surrogate", "a\ud800"),
    ("control C0", "a\x01"),
    ("newline", "a\nb"),
    ("tab", "a\tb"),
    ("DEL", "a\x7f"),
    ("control C1", "a\x85"),
    ("not a string", 42),
]

# Names that are bad as a component of a path (in a path, "/" and "" are separators).
BAD_COMPONENTS = [
    (label, n) for label, n in BAD_NAMES if label not in ("slash", "empty", "not a string")
]


def nested(levels: int) -> dict[str, Any]:
    """Metadata ``levels`` objects deep: {"a": {"a": ... {}}} (built without recursion)."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def as_path(name: object, prefix: str = "/d/") -> object:
    if isinstance(name, bytes):
        return prefix.encode() + name
    return prefix + str(name)


@pytest.fixture(scope="module")
def shared(pg_cluster: LocalPostgres) -> Iterator[Coordinator]:
    """One database for all refusal cases: each case checks that it wrote nothing, so
    they cannot disturb one another (and a fresh database per case would cost ~0.1 s)."""
    url = pg_cluster.create_database("pk_bad_input", template="pk_template")
    with Coordinator.connect(url, lock_timeout=5.0) as coord:
        coord.create_namespace("t")
        yield coord


@pytest.fixture(scope="module")
def tree(shared: Coordinator) -> dict[str, str]:
    coord, ns = shared, "t"
    coord.create_namespace("other")
    return {
        "root": coord.stat(ns, "/").id,
        "d": coord.mkdir(ns, "/d").node.id,
        "e": coord.mkdir(ns, "/d/e").node.id,
        "f": coord.create_file(ns, "/d/f", "content").node.id,
        "foreign": coord.mkdir("other", "/x").node.id,
    }


CASES: list[Case] = []
for label, name in BAD_NAMES:
    CASES.append((f"rename to {label}", lambda c, t, n=name: c.rename("t", "/d/f", n), InvalidName))
    CASES.append(
        (f"rename by id to {label}", lambda c, t, n=name: c.rename("t", t["f"], n), InvalidName)
    )
for label, name in BAD_COMPONENTS:
    CASES += [
        (f"mkdir {label}", lambda c, t, n=name: c.mkdir("t", as_path(n)), InvalidName),
        (f"mkdir -p {label}",
         lambda c, t, n=name: c.mkdir("t", as_path(n, "/new/"), parents=True), InvalidName),
        (f"create_file {label}", lambda c, t, n=name: c.create_file("t", as_path(n)), InvalidName),
        (f"move to {label}", lambda c, t, n=name: c.move("t", "/d/f", as_path(n)), InvalidName),
        (f"move by id to {label}",
         lambda c, t, n=name: c.move("t", t["f"], as_path(n, "/")), InvalidName),
        (f"stat {label}", lambda c, t, n=name: c.stat("t", as_path(n)), InvalidName),
        (f"delete {label}", lambda c, t, n=name: c.delete("t", as_path(n)), InvalidName),
        (f"write {label}", lambda c, t, n=name: c.write_file("t", as_path(n), "x"), InvalidName),
    ]

BAD_PATHS: list[tuple[str, str, type[Exception]]] = [
    ("double slash", "//a", InvalidPath),
    ("inner double slash", "/d//f", InvalidPath),
    ("trailing slash relative", "a/", InvalidPath),
    ("trailing slash", "/d/", InvalidPath),
    ("relative", "a", InvalidPath),
    ("relative nested", "d/f", InvalidPath),
    ("empty", "", InvalidPath),
    ("dot component", "/d/./f", InvalidName),
    ("dotdot component", "/d/../d", InvalidName),
    ("too long", "/" + "/".join(["x" * 200] * 21), InvalidPath),
    ("too deep", "/a" * 257, InvalidPath),
]
for label, path, err in BAD_PATHS:
    CASES += [
        (f"mkdir path {label}", lambda c, t, p=path: c.mkdir("t", p), err),
        (f"mkdir -p path {label}", lambda c, t, p=path: c.mkdir("t", p, parents=True), err),
        (f"create_file path {label}", lambda c, t, p=path: c.create_file("t", p), err),
        (f"move dst {label}", lambda c, t, p=path: c.move("t", "/d/f", p), err),
    ]
    if path.startswith("/"):  # otherwise it is a node id, see below
        # The depth and length limits guard paths that name new nodes; an existing node
        # may lie past them (moved there in O(1)), so a lookup only finds nothing.
        lookup_err = NotFound if label in ("too long", "too deep") else err
        CASES += [
            (f"listdir {label}", lambda c, t, p=path: c.listdir("t", p), lookup_err),
            (f"delete path {label}", lambda c, t, p=path: c.delete("t", p), lookup_err),
            (f"rename path {label}", lambda c, t, p=path: c.rename("t", p, "z"), lookup_err),
            (f"stat path {label}", lambda c, t, p=path: c.stat("t", p), lookup_err),
        ]

CASES += [
    # Paths that do not exist, and a file in the middle of a path.
    ("mkdir missing parent", lambda c, t: c.mkdir("t", "/nope/x"), NotFound),
    ("create missing parent", lambda c, t: c.create_file("t", "/d/nope/x"), NotFound),
    ("stat missing", lambda c, t: c.stat("t", "/d/nope"), NotFound),
    ("delete missing", lambda c, t: c.delete("t", "/nope"), NotFound),
    ("rename missing", lambda c, t: c.rename("t", "/nope", "x"), NotFound),
    ("move missing src", lambda c, t: c.move("t", "/nope", "/x"), NotFound),
    ("move missing dst parent", lambda c, t: c.move("t", "/d/f", "/nope/f"), NotFound),
    ("write missing", lambda c, t: c.write_file("t", "/d/nope", "x"), NotFound),
    ("mkdir under a file", lambda c, t: c.mkdir("t", "/d/f/x"), NotADirectory),
    ("mkdir -p through a file", lambda c, t: c.mkdir("t", "/d/f/x/y", parents=True),
     NotADirectory),
    ("mkdir -p onto a file", lambda c, t: c.mkdir("t", "/d/f", parents=True), AlreadyExists),
    ("create under a file", lambda c, t: c.create_file("t", "/d/f/x"), NotADirectory),
    ("stat through a file", lambda c, t: c.stat("t", "/d/f/x/y"), NotADirectory),
    ("move under a file", lambda c, t: c.move("t", "/d/e", "/d/f/e"), NotADirectory),
    ("listdir of a file", lambda c, t: c.listdir("t", "/d/f"), NotADirectory),
    ("write a directory", lambda c, t: c.write_file("t", "/d", "x"), IsADirectory),
    # The root.
    ("move the root", lambda c, t: c.move("t", "/", "/x"), InvalidMove),
    ("move the root by id", lambda c, t: c.move("t", t["root"], "/d/x"), InvalidMove),
    ("rename the root", lambda c, t: c.rename("t", "/", "x"), InvalidMove),
    ("rename the root by id", lambda c, t: c.rename("t", t["root"], "x"), InvalidMove),
    ("delete the root", lambda c, t: c.delete("t", "/", recursive=True), InvalidMove),
    ("delete the root by id", lambda c, t: c.delete("t", t["root"]), InvalidMove),
    ("move onto the root path", lambda c, t: c.move("t", "/d", "/"), InvalidPath),
    ("mkdir the root", lambda c, t: c.mkdir("t", "/"), InvalidPath),
    ("create the root", lambda c, t: c.create_file("t", "/"), InvalidPath),
    # Into itself or its own subtree.
    ("move into itself", lambda c, t: c.move("t", "/d", "/d/d"), InvalidMove),
    ("move into itself by id", lambda c, t: c.move("t", t["d"], "/d/x"), InvalidMove),
    ("move into own subtree", lambda c, t: c.move("t", "/d", "/d/e/d"), InvalidMove),
    ("move into own subtree by id", lambda c, t: c.move("t", t["d"], "/d/e/x"), InvalidMove),
    # Node ids that are not ids, do not exist, or belong to another namespace.
    ("stat bad id", lambda c, t: c.get("t", "not-an-id"), NotFound),
    ("rename bad id", lambda c, t: c.rename("t", "not-an-id", "x"), NotFound),
    ("delete bad id", lambda c, t: c.delete("t", "d/f"), NotFound),
    ("write bad id", lambda c, t: c.write_file("t", "12345", "x"), NotFound),
    ("move bad id", lambda c, t: c.move("t", "", "/x"), NotFound),
    ("get unknown id", lambda c, t: c.get("t", str(uuid.uuid4())), NotFound),
    ("rename unknown id", lambda c, t: c.rename("t", str(uuid.uuid4()), "x"), NotFound),
    ("get foreign id", lambda c, t: c.get("t", t["foreign"]), NotFound),
    ("rename foreign id", lambda c, t: c.rename("t", t["foreign"], "x"), NotFound),
    ("delete foreign id", lambda c, t: c.delete("t", t["foreign"]), NotFound),
    # Content and metadata.
    ("content with NUL", lambda c, t: c.create_file("t", "/d/g", "a\x00b"), InvalidContent),
    ("write content with NUL", lambda c, t: c.write_file("t", "/d/f", "\x00"), InvalidContent),
    ("content lone surrogate", lambda c, t: c.create_file("t", "/d/g", "\udc80"), InvalidContent),
    ("content bytes", lambda c, t: c.write_file("t", t["f"], b"x"), InvalidContent),
    ("content None", lambda c, t: c.create_file("t", "/d/g", None), InvalidContent),
    ("metadata list", lambda c, t: c.create_file("t", "/d/g", "", [1]), InvalidContent),
    ("metadata str", lambda c, t: c.write_file("t", "/d/f", "", "x"), InvalidContent),
    ("metadata int", lambda c, t: c.create_file("t", "/d/g", "", 5), InvalidContent),
    ("metadata NaN", lambda c, t: c.create_file("t", "/d/g", "", {"x": float("nan")}),
     InvalidContent),
    ("metadata object", lambda c, t: c.create_file("t", "/d/g", "", {"x": object()}),
     InvalidContent),
    ("metadata NUL", lambda c, t: c.write_file("t", "/d/f", "", {"x": "a\x00"}), InvalidContent),
    ("metadata NUL key", lambda c, t: c.write_file("t", "/d/f", "", {"\x00": 1}), InvalidContent),
    ("metadata surrogate", lambda c, t: c.write_file("t", "/d/f", "", {"x": "\ud800"}),
     InvalidContent),
    # Nested past the limit (deep enough to exhaust a recursive walk, too).
    ("metadata too deep", lambda c, t: c.create_file("t", "/d/g", "", nested(101)),
     InvalidContent),
    ("metadata far too deep", lambda c, t: c.set_metadata("t", "/d/f", nested(5000)),
     InvalidContent),
    ("metadata too deep in a list", lambda c, t: c.write_file(
        "t", "/d/f", "", {"x": json.loads("[" * 150 + "]" * 150)}), InvalidContent),
]

BAD_NAMESPACES: list[Any] = [
    "", "a b", "ä", "-x", ".x", "x" * 129, "a/b", "a\x00", "t;drop", b"\xff"
]
for bad_ns in BAD_NAMESPACES:
    CASES += [
        (f"create namespace {bad_ns!r}", lambda c, t, b=bad_ns: c.create_namespace(b), InvalidName),
        (f"mkdir in namespace {bad_ns!r}", lambda c, t, b=bad_ns: c.mkdir(b, "/x"), InvalidName),
        (f"drop namespace {bad_ns!r}", lambda c, t, b=bad_ns: c.drop_namespace(b), InvalidName),
    ]
CASES += [
    ("mkdir in missing namespace", lambda c, t: c.mkdir("missing", "/x"), NotFound),
    ("drop missing namespace", lambda c, t: c.drop_namespace("missing"), NotFound),
    ("create existing namespace", lambda c, t: c.create_namespace("t"), AlreadyExists),
    ("walk missing namespace", lambda c, t: list(c.walk("missing")), NotFound),
    ("walk through a file", lambda c, t: list(c.walk("t", "/d/f/x")), NotADirectory),
]


@pytest.mark.parametrize(("label", "call", "error"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_nothing_is_written(
    shared: Coordinator, tree: dict[str, str], label: str,
    call: Callable[..., Any], error: type[Exception],
) -> None:
    coord = shared
    before = db_state(coord, "t"), db_state(coord, "other")
    with pytest.raises(error) as info:
        call(coord, tree)
    assert type(info.value) is error, f"{label}: {type(info.value).__name__}: {info.value}"
    assert (db_state(coord, "t"), db_state(coord, "other")) == before


def test_metadata_nesting_limit_is_inclusive(coord: Coordinator, ns: str) -> None:
    """100 levels of objects and arrays are stored and read back; 101 are refused by
    create, write and set_metadata alike, with the same typed error."""
    lists = {"l": json.loads("[" * 99 + "]" * 99)}  # the object, then 99 lists: 100
    assert coord.create_file(ns, "/ok", "", nested(100)).node.metadata == nested(100)
    assert coord.mkdir(ns, "/d").node.version == 1
    coord.set_metadata(ns, "/d", lists)
    assert coord.stat(ns, "/d").metadata == lists
    too_deep = {"l": [lists["l"]]}
    for call in (lambda: coord.create_file(ns, "/no", "", nested(101)),
                 lambda: coord.write_file(ns, "/ok", "", nested(101)),
                 lambda: coord.set_metadata(ns, "/ok", nested(101)),
                 lambda: coord.set_metadata(ns, "/d", too_deep)):
        with pytest.raises(InvalidContent, match="nested deeper than 100 levels"):
            call()
    assert coord.stat(ns, "/ok").metadata == nested(100)


def test_name_limits_are_inclusive(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/" + "x" * 255)
    two_byte = "é" * 127 + "x"  # 255 bytes
    assert len(two_byte.encode()) == 255
    coord.create_file(ns, "/" + two_byte)
    four_byte = "\U0001f600" * 63 + "abc"  # 255 bytes
    coord.rename(ns, "/" + two_byte, four_byte)
    assert coord.stat(ns, "/" + four_byte).name == four_byte
    # Valid UTF-8 bytes are accepted as names and paths too.
    coord.mkdir(ns, "/bytes-ök".encode())  # type: ignore[arg-type]
    assert coord.stat(ns, "/bytes-ök").is_dir


def test_nfc_and_nfd_are_one_name(coord: Coordinator, ns: str) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    node = coord.mkdir(ns, "/" + nfd).node
    assert node.name == nfc  # stored NFC
    before = event_rows(coord)
    with pytest.raises(AlreadyExists):
        coord.create_file(ns, "/" + nfc)
    with pytest.raises(AlreadyExists):
        coord.mkdir(ns, "/" + nfd)
    assert event_rows(coord) == before
    assert coord.stat(ns, "/" + nfd).id == node.id
    assert [n.name for n in coord.listdir(ns, "/")] == [nfc]
    coord.create_file(ns, "/x")
    with pytest.raises(AlreadyExists):
        coord.rename(ns, "/x", nfd)


BAD_ROWS = [
    ("slash", "a/b"), ("dot", "."), ("dotdot", ".."), ("empty", ""), ("control", "a\x01"),
    ("C1", "a\x85"), ("too long", "x" * 256),
]


@pytest.mark.parametrize(("label", "name"), BAD_ROWS, ids=[r[0] for r in BAD_ROWS])
def test_schema_refuses_invalid_names(coord: Coordinator, ns: str, label: str, name: str) -> None:
    """The constraints stop invalid trees even from code that bypasses the API."""
    root = coord.stat(ns, "/").id
    with pytest.raises(IntegrityError), coord.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                 "VALUES (:ns, :id, :p, :name, 'dir')"),
            {"ns": ns, "id": uuid.uuid4(), "p": root, "name": name},
        )


def test_schema_refuses_invalid_trees(coord: Coordinator, ns: str) -> None:
    root = coord.stat(ns, "/").id
    f = coord.create_file(ns, "/f").node.id
    d = coord.mkdir(ns, "/d").node.id
    bad: list[tuple[str, dict[str, Any]]] = [
        ("second root", {"p": None, "name": "", "kind": "dir"}),
        ("parent is a file", {"p": f, "name": "x", "kind": "dir"}),
        ("duplicate sibling", {"p": root, "name": "d", "kind": "file"}),
        ("missing parent", {"p": uuid.uuid4(), "name": "x", "kind": "dir"}),
        ("bad kind", {"p": d, "name": "x", "kind": "link"}),
    ]
    for label, row in bad:
        with pytest.raises(IntegrityError), coord.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                     "VALUES (:ns, :id, :p, :name, :kind)"),
                {"ns": ns, "id": uuid.uuid4(), **row},
            )
        assert label
