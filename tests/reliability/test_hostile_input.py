"""Hostile input through the Python API: a typed error or a correct success, never
anything else, and never a partial write.

Every corpus entry goes through mkdir, create_file (the entry is also the file's
content), rename and move (of one travelling file, by id) and stat. The reference
model (``model.py``, which validates names without the coordinator's code) runs
the same calls: both must fail with the same ``CoordinatorError`` subclass or
both succeed with the same normalized path. After each entry the counts of nodes
and events must be exactly what the successful calls explain (so a failed call
wrote nothing); a success must be found again by ``stat`` under the spelling
sent and under its NFC form, and ``listdir`` must show exactly the names the
model holds.

Unicode normalization (decided in ``coordinator.paths``, tested here): names are
stored in NFC; the NFD spelling of an existing name is the same name
(``AlreadyExists`` on create, found by ``stat``, a no-op on rename); the 255-byte
limit applies to the NFC form; the 4,096-byte path limit to the path as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.errors import AlreadyExists, CoordinatorError, InvalidContent
from coordinator.results import MutationResult

from . import corpus
from .dbcheck import counts, table_rows
from .model import MResult, Namespace

NS = "hostile"


def under(directory: str, value: object) -> object:
    """``directory/value`` for text and bytes; anything else is passed on as the path."""
    if isinstance(value, str):
        return f"{directory}/{value}"
    if isinstance(value, bytes):
        return directory.encode() + b"/" + value
    return value


class Pair:
    """Runs each call on the coordinator and on the model and checks they agree."""

    def __init__(self, coord: Coordinator, model: Namespace, ns: str) -> None:
        self.coord, self.model, self.ns = coord, model, ns
        self.calls = 0
        self.successes = 0
        #: model node id -> coordinator node id, for calls by id
        self.ids: dict[str, str] = {}
        self.expected_nodes, self.expected_events = counts(coord.engine, ns)

    def call(self, what: str, op: str, *args: Any, grows: bool) -> MutationResult | None:
        """``op`` on both sides with the same arguments; the outcomes must match.
        Returns the coordinator's result on success."""
        self.calls += 1
        r_err: CoordinatorError | None = None
        m_err: CoordinatorError | None = None
        r: MutationResult | None = None
        try:
            first = self.ids.get(args[0], args[0]) if isinstance(args[0], str) else args[0]
            r = getattr(self.coord, op)(self.ns, first, *args[1:])
        except CoordinatorError as exc:
            r_err = exc
        except Exception as exc:  # anything untyped is the bug this test hunts
            pytest.fail(f"{what}: untyped {exc!r}")
        try:
            m: MResult = getattr(self.model, op)(*args)
        except CoordinatorError as exc:
            m_err = exc
        if r_err is not None or m_err is not None:
            assert type(r_err) is type(m_err), f"{what}: coordinator {r_err!r} model {m_err!r}"
            return None
        assert r is not None
        assert r.node.path == m.node.path, f"{what}: {r.node.path!r} != {m.node.path!r}"
        assert (r.seq is None) == (m.events == 0), f"{what}: seq {r.seq}, model {m.events}"
        self.successes += 1
        self.expected_events += m.events
        if grows:
            self.expected_nodes += m.events
        return r

    def check_counts(self, what: str) -> None:
        got = counts(self.coord.engine, self.ns)
        want = (self.expected_nodes, self.expected_events)
        assert got == want, f"{what}: (nodes, events) {got}, expected {want}: partial write?"


@pytest.fixture
def setup(coord: Coordinator) -> Iterator[tuple[Pair, str]]:
    coord.create_namespace(NS)
    model = Namespace()
    for d in ["/d", "/f", "/m", "/r"]:
        coord.mkdir(NS, d)
        model.mkdir(d)
    real = coord.create_file(NS, "/r/traveller", "t").node.id
    traveller = model.create_file("/r/traveller", "t").node.id
    pair = Pair(coord, model, NS)
    pair.ids[traveller] = real
    yield pair, traveller


def test_hostile_names(setup: tuple[Pair, str]) -> None:
    pair, traveller = setup
    coord, model = pair.coord, pair.model
    traveller_id = pair.ids[traveller]
    entries = corpus.names()
    assert len(entries) >= 1000
    for i, entry in enumerate(entries):
        v = entry.value
        tag = f"#{i} {entry.family} {v!r:.60}"
        made = pair.call(f"mkdir {tag}", "mkdir", under("/d", v), grows=True)
        if made is not None:
            # Found again under the spelling sent and under the stored (NFC) form.
            for ref in (under("/d", v), made.node.path):
                assert coord.stat(NS, ref).id == made.node.id, f"stat {ref!r}"  # type: ignore[arg-type]
        content = v if isinstance(v, str) else ""
        pair.call(f"create_file {tag}", "create_file", under("/f", v), content, grows=True)
        # The travelling file, by id: renamed to the entry, then moved under it.
        pair.call(f"rename {tag}", "rename", traveller, v, grows=False)
        pair.call(f"move {tag}", "move", traveller, under("/m" if i % 2 else "/r", v),
                  grows=False)
        pair.check_counts(tag)
    for d in ["/d", "/f", "/m", "/r"]:
        got = [n.name for n in coord.listdir(NS, d)]
        assert got == [v.name for v in model.listdir(d)], f"listdir {d}"
    assert coord.get(NS, traveller_id).path == model.stat(traveller).path
    assert pair.successes > 500, "the corpus should also exercise successes"
    print(f"\nhostile names: {len(entries)} entries, {pair.calls} calls, "
          f"{pair.successes} successes")


def test_hostile_paths(database_url: str) -> None:
    """Whole paths, with a small configured depth limit, through mkdir -p, create_file
    and stat."""
    depth = 8
    with Coordinator.connect(database_url, max_depth=depth) as coord:
        coord.create_namespace(NS)
        model = Namespace(max_depth=depth)
        coord.mkdir(NS, "/p")
        model.mkdir("/p")
        pair = Pair(coord, model, NS)
        for i, entry in enumerate(corpus.paths(depth)):
            v: Any = entry.value
            tag = f"#{i} {entry.family} {v!r:.60}"
            pair.call(f"mkdir -p {tag}", "mkdir", v, True, grows=True)
            pair.call(f"create_file {tag}", "create_file", under("/p", v), grows=True)
            try:
                got: str = coord.stat(NS, v).path
            except CoordinatorError as exc:
                got = type(exc).__name__
            try:
                want: str = model.stat(v).path
            except CoordinatorError as exc:
                want = type(exc).__name__
            assert got == want, f"stat {tag}"
            pair.check_counts(tag)
        rows = table_rows(coord.engine, NS)
        assert len(rows) == len(model.nodes)


CONTENTS: list[object] = [
    "", "\x00", "a\x00", "\ud800", "\x01\x1b[31m", "'; DROP TABLE nodes; --", "\\", '"',
    "{}", "e\u0301", "\U0001f600" * 1000, "x" * 200_000, None, 42, b"bytes",
]
METADATA: list[object] = [
    None, {}, {"a": 1}, {"k": "\x00"}, {"\x00": 1}, {"k": "\ud800"}, {"k": float("nan")},
    {"k": float("inf")}, {(1, 2): 3}, {1: "int key"}, [], "str", {"k": {"deep": [1, 2, {}]}},
    {"k": 2**70}, {"'; DROP": '"'}, {"k": object()},
]


def test_hostile_content_and_metadata(setup: tuple[Pair, str]) -> None:
    pair, traveller = setup
    coord, model = pair.coord, pair.model
    traveller_id = pair.ids[traveller]
    for c in CONTENTS:
        for md in METADATA:
            tag = f"content {c!r:.30} metadata {md!r:.40}"
            pair.call(f"write {tag}", "write_file", traveller, c, md, grows=False)
            pair.check_counts(tag)
    node = coord.get(NS, traveller_id)
    assert (node.content, node.metadata, node.version) == (
        model.stat(traveller).content, model.stat(traveller).metadata, model.stat(traveller).version
    )


def test_unicode_normalization(coord: Coordinator) -> None:
    """NFC is stored; NFD names the same node; the limit counts NFC bytes."""
    coord.create_namespace(NS)
    nfc, nfd = "\u00e9t\u00e9", "e\u0301te\u0301"
    made = coord.mkdir(NS, f"/{nfd}")
    assert made.node.name == nfc and made.node.path == f"/{nfc}"
    with pytest.raises(AlreadyExists):
        coord.mkdir(NS, f"/{nfc}")
    with pytest.raises(AlreadyExists):
        coord.create_file(NS, f"/{nfd}")
    assert coord.stat(NS, f"/{nfd}").id == made.node.id
    assert coord.stat(NS, f"/{nfc}").id == made.node.id
    assert [n.name for n in coord.listdir(NS, "/")] == [nfc]
    same = coord.rename(NS, made.node.id, nfd)
    assert same.seq is None and same.node.version == made.node.version
    # Cyrillic "\u0430" is a different letter from Latin "a": two nodes, as in every filesystem.
    coord.mkdir(NS, "/a")
    coord.mkdir(NS, "/\u0430")
    assert len(coord.listdir(NS, "/")) == 3
    # 100 x NFD "é" is 300 bytes as sent, 200 bytes stored: accepted.
    assert coord.mkdir(NS, "/" + "e\u0301" * 100).node.name == "\u00e9" * 100


def test_metadata_with_backslash_u0000_text_is_accepted(coord: Coordinator) -> None:
    """The six characters ``\\u0000`` are ordinary text (no NUL), which jsonb stores."""
    coord.create_namespace(NS)
    coord.create_file(NS, "/ok", "", {"k": "\\u0000"})
    assert coord.stat(NS, "/ok").metadata == {"k": "\\u0000"}


@pytest.mark.parametrize("limit", ["depth", "bytes"])
def test_every_walked_node_can_be_stat_by_its_path(database_url: str, limit: str) -> None:
    """A move or rename must not leave any node past the configured limits (it would be
    listed by walk but unreachable by its path): refusing it is a correct answer."""
    with Coordinator.connect(database_url, max_depth=4 if limit == "depth" else 256) as coord:
        coord.create_namespace(NS)
        try:
            if limit == "depth":
                coord.mkdir(NS, "/a/b/c", parents=True)
                coord.mkdir(NS, "/x/y", parents=True)
                coord.move(NS, "/x", "/a/b/c/x")  # /a/b/c/x/y: 5 levels, limit 4
            else:
                chain = "/t/" + "/".join(["n" * 255] * 15)  # 3,842 bytes
                coord.mkdir(NS, chain, parents=True)
                coord.create_file(NS, chain + "/f")
                coord.rename(NS, "/t", "t" * 255)  # .../f becomes 4,098 bytes, limit 4,096
        except CoordinatorError:
            pass
        for node in coord.walk(NS):
            assert coord.stat(NS, node.path).id == node.id, node.path
            if node.parent_id is not None:
                coord.rename(NS, node.id, node.name)  # a no-op rename by id must work


def test_invalid_content_is_typed(coord: Coordinator) -> None:
    """A sanity anchor for the content families above: NUL in content is InvalidContent."""
    coord.create_namespace(NS)
    with pytest.raises(InvalidContent):
        coord.create_file(NS, "/x", "a\x00b")
