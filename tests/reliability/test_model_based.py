"""Model-based test: the coordinator and the reference model take the same random steps.

A step is a single call, a group of several commands in one transaction
(``Coordinator.apply`` or ``Coordinator.transaction``; a failing command rolls the
whole group back) or an import: a rule written twice (a Python twin beside a server
function, a second validator) that drifts shows up as a disagreement on one of them.

After every step the two must agree on the result (the node's path, kind,
version, content and metadata, and whether anything changed) or on the error
class; the whole tree (``walk``) must equal the model's; the events the step
appended must be exactly the step's transaction (ending at the returned ``seq``,
none for a failure or a no-op); and the fold of the event log must equal the
tree. Hypothesis shrinks a failure to a minimal sequence of steps.

One database for the test, a fresh namespace per example (cheaper than a
database per example, and namespaces are isolated by construction).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from coordinator import Coordinator
from coordinator.commands import (
    Command,
    Copy,
    CreateFile,
    Delete,
    Mkdir,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)
from coordinator.errors import CoordinatorError
from coordinator.results import POSITION_BLOCK, MutationResult, Node

from .dbcheck import setfold_rows
from .fold_check import Fold
from .model import MResult, Namespace, View

# "é" precomposed and decomposed are one name: both spellings are drawn.
VALID_NAMES = ["a", "b", "c", "\u00e9", "e\u0301"]
INVALID_NAMES = [".", "..", "", "x/y", "a\x07"]
# Mostly valid names (index 0 first, so failures shrink towards "a").
NAMES = st.sampled_from(VALID_NAMES * 4 + INVALID_NAMES)
CONTENTS = st.sampled_from(["", "x", "h\u00e9llo", "e\u0301"])
METADATA = st.one_of(st.none(), st.fixed_dictionaries({"k": st.integers(0, 3)}))
IF_VERSION = st.sampled_from([None, None, "right", "wrong"])

ERRORS: dict[str, int] = {}
STATS = {
    "examples": 0, "steps": 0, "changes": 0, "no_ops": 0, "errors_agreed": 0, "events_checked": 0,
    "groups": 0, "groups_refused": 0, "imports": 0, "imports_refused": 0,
}
#: One command of a group: what it is (for messages), the command, and the same step
#: on the model.
Step = tuple[str, Command, Callable[[Namespace], MResult]]


def join(parent: str, name: str) -> str:
    return ("" if parent == "/" else parent) + "/" + name


class TreeMachine(RuleBasedStateMachine):
    coord: ClassVar[Coordinator]
    _ns_counter: ClassVar[itertools.count[int]] = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.ns = f"model-{uuid.uuid4().hex[:8]}-{next(self._ns_counter)}"
        self.coord.create_namespace(self.ns)
        self.model = Namespace()
        self.m2r: dict[str, str] = {}
        self.fresh = 0  # the names ``_fresh_name`` handed out
        self.fold = Fold()
        self.cursor: int | None = None
        self._read_new()  # namespace_created
        STATS["examples"] += 1

    # ------------------------------------------------------------ drawing

    def _live_paths(self) -> list[str]:
        return sorted(v.path for v in self.model.walk())

    def _path(self, data: st.DataObject, depth: int, fresh: bool = False) -> str:
        """An existing path with ``depth`` names drawn below it (maybe below a file).
        ``fresh``: below a directory, names no node has had yet, mostly (so that most
        creates of a group or an import make a new node)."""
        at = sorted(v.path for v in self.model.walk() if v.kind == "dir") if fresh \
            else self._live_paths()
        path = data.draw(st.sampled_from(at), label="at")
        for _ in range(depth):
            path = join(path, self._fresh_name(data) if fresh else data.draw(NAMES, label="name"))
        return path

    def _fresh_name(self, data: st.DataObject) -> str:
        if data.draw(st.integers(0, 5), label="e-acute") == 0:
            return data.draw(st.sampled_from(["\u00e9", "e\u0301"]), label="name")
        self.fresh += 1
        return f"n{self.fresh}"

    def _ref(self, data: st.DataObject, careful: bool = False, kind: str | None = None
             ) -> tuple[str, str]:
        """(the coordinator's reference, the model's) to one node, live or not; with
        ``careful``, a live node below the root (of ``kind`` if there is one), so that
        most groups can commit."""
        hows = ["path", "id"] if careful else [
            "path", "id", "path", "id", "deleted", "bad", "root"]
        how = data.draw(st.sampled_from(hows), label="ref")
        below_root = sorted(set(self.model.nodes) - {"m0"})
        if careful and kind is not None:
            below_root = [m for m in below_root if self.model.nodes[m].kind == kind] or below_root
        if how == "deleted" and not self.model.deleted:
            how = "path"
        if how == "root" or (how in ("path", "id") and not below_root):
            return "/", "/"
        if how == "path":
            p = self.model.path_of(data.draw(st.sampled_from(below_root), label="node"))
            if not careful and data.draw(st.integers(0, 3), label="missing") == 3:
                p = join(p, data.draw(NAMES, label="name"))
            return p, p
        if how == "id":
            mid = data.draw(st.sampled_from(below_root), label="id")
            return self.m2r[mid], mid
        if how == "deleted":
            mid = data.draw(st.sampled_from(sorted(self.model.deleted)), label="gone")
            return self.m2r[mid], mid
        bad = data.draw(st.sampled_from(["not-a-uuid", str(uuid.UUID(int=7))]), label="bad")
        return bad, bad

    def _version(self, data: st.DataObject, mref: str, careful: bool = False) -> int | None:
        mode = data.draw(st.sampled_from([None, "right"]) if careful else IF_VERSION,
                         label="if_version")
        if mode is None:
            return None
        try:
            current = self.model.stat(mref).version
        except CoordinatorError:
            current = 1
        return current if mode == "right" else current + 1

    # --------------------------------------------------------- comparing

    def _read_new(self) -> list[Any]:
        events, self.cursor = self.coord.read_events(self.cursor, namespaces=[self.ns], wait=30)
        self.fold.apply_all(events)
        STATS["events_checked"] += len(events)
        return events

    def _same_node(self, what: str, real: Node, view: View) -> None:
        got = (real.path, real.name, real.kind, real.version, real.metadata)
        want = (view.path, view.name, view.kind, view.version, view.metadata)
        assert got == want, f"{what}: coordinator {got} != model {want}"
        if real.kind == "file" and real.content is not None:
            assert real.content == view.content, f"{what}: content"
        known = self.m2r.get(view.id)
        if known is None:
            assert real.id not in self.m2r.values(), f"{what}: id {real.id} reused"
            self.m2r[view.id] = real.id
        else:
            assert known == real.id, f"{what}: model node {view.id} is {known}, got {real.id}"

    def _mutate(
        self, what: str, real: Callable[[], MutationResult], model: Callable[[], MResult],
        top_first: bool = False,
    ) -> None:
        STATS["steps"] += 1
        r_err: CoordinatorError | None = None
        m_err: CoordinatorError | None = None
        try:
            r = real()
        except CoordinatorError as exc:
            r_err = exc
        try:
            m = model()
        except CoordinatorError as exc:
            m_err = exc
        events = self._read_new()
        if r_err is not None or m_err is not None:
            assert type(r_err) is type(m_err), f"{what}: coordinator {r_err!r}, model {m_err!r}"
            assert events == [], f"{what}: a failed call appended {events}"
            STATS["errors_agreed"] += 1
            ERRORS[type(r_err).__name__] = ERRORS.get(type(r_err).__name__, 0) + 1
            return
        self._same_node(what, r.node, m.node)
        assert len(events) == m.events, f"{what}: {len(events)} events, model says {m.events}"
        STATS["changes" if m.events else "no_ops"] += 1
        if m.events == 0:
            assert r.seq is None, f"{what}: a no-op returned seq {r.seq}"
            return
        assert r.seq == events[-1].position, f"{what}: seq {r.seq} is not its last event"
        # The changed node's event is the last; a copy answers its top, whose is first.
        assert events[0 if top_first else -1].node_id == r.node.id
        blocks = {e.position // POSITION_BLOCK for e in events}
        assert len(blocks) == 1, f"{what}: one call's events span transactions {blocks}"

    def _read(self, what: str, real: Callable[[], Node], model: Callable[[], View]) -> None:
        STATS["steps"] += 1
        r_err: CoordinatorError | None = None
        m_err: CoordinatorError | None = None
        try:
            r = real()
        except CoordinatorError as exc:
            r_err = exc
        try:
            m = model()
        except CoordinatorError as exc:
            m_err = exc
        if r_err is not None or m_err is not None:
            assert type(r_err) is type(m_err), f"{what}: coordinator {r_err!r}, model {m_err!r}"
            STATS["errors_agreed"] += 1
            return
        self._same_node(what, r, m)

    # ------------------------------------------------------------- rules

    @initialize()
    def seed_tree(self) -> None:
        """Start from a small tree so that early steps have something to move."""
        for p in ["/a/b", "/c"]:
            self._mutate(f"mkdir -p {p}", partial(self.coord.mkdir, self.ns, p, parents=True),
                         partial(self.model.mkdir, p, parents=True))
        for p in ["/a/f", "/c/g"]:
            self._mutate(f"create_file {p}", partial(self.coord.create_file, self.ns, p, "s"),
                         partial(self.model.create_file, p, "s"))

    @rule(data=st.data(), parents=st.booleans())
    def mkdir(self, data: st.DataObject, parents: bool) -> None:
        p = self._path(data, depth=data.draw(st.integers(1, 2)) if parents else 1)
        self._mutate(
            f"mkdir({p!r}, parents={parents})",
            lambda: self.coord.mkdir(self.ns, p, parents=parents),
            lambda: self.model.mkdir(p, parents=parents),
        )

    @rule(data=st.data(), content=CONTENTS, metadata=METADATA)
    def create_file(self, data: st.DataObject, content: str,
                    metadata: dict[str, Any] | None) -> None:
        p = self._path(data, depth=1)
        self._mutate(
            f"create_file({p!r}, {content!r}, {metadata!r})",
            lambda: self.coord.create_file(self.ns, p, content, metadata),
            lambda: self.model.create_file(p, content, metadata),
        )

    @rule(data=st.data(), content=CONTENTS, metadata=METADATA)
    def write_file(self, data: st.DataObject, content: str,
                   metadata: dict[str, Any] | None) -> None:
        rref, mref = self._ref(data)
        v = self._version(data, mref)
        self._mutate(
            f"write_file({mref!r}, {content!r}, {metadata!r}, if_version={v})",
            lambda: self.coord.write_file(self.ns, rref, content, metadata, if_version=v),
            lambda: self.model.write_file(mref, content, metadata, if_version=v),
        )

    @rule(data=st.data(), name=NAMES)
    def rename(self, data: st.DataObject, name: str) -> None:
        rref, mref = self._ref(data)
        v = self._version(data, mref)
        self._mutate(
            f"rename({mref!r}, {name!r}, if_version={v})",
            lambda: self.coord.rename(self.ns, rref, name, if_version=v),
            lambda: self.model.rename(mref, name, if_version=v),
        )

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        rref, mref = self._ref(data)
        # Any existing path plus a name: other directories, the node's own
        # subtree, below a file, the node's own place (a no-op).
        dst = self._path(data, depth=1)
        v = self._version(data, mref)
        self._mutate(
            f"move({mref!r}, {dst!r}, if_version={v})",
            lambda: self.coord.move(self.ns, rref, dst, if_version=v),
            lambda: self.model.move(mref, dst, if_version=v),
        )

    @rule(data=st.data(), own_name=st.booleans(), careful=st.booleans())
    def copy(self, data: st.DataObject, own_name: bool, careful: bool) -> None:
        # Half of them careful (a live node, a fresh name, the right version): most of
        # those copy; the others draw anything.
        rref, mref = self._ref(data, careful)
        # Careful: any directory; else any path (a file too). Either may be the node's
        # own subtree, or its own directory where its own name is taken.
        dst = self._path(data, depth=0, fresh=careful)
        name = None if own_name else (
            self._fresh_name(data) if careful else data.draw(NAMES, label="name"))
        v = self._version(data, mref, careful)
        before = len(self.model.nodes)
        self._mutate(
            f"copy({mref!r}, {dst!r}, {name!r}, if_version={v})",
            lambda: self.coord.copy(self.ns, rref, dst, name, if_version=v),
            lambda: self.model.copy(mref, dst, name, if_version=v),
            top_first=True,
        )
        copied = len(self.model.nodes) - before
        if copied:
            STATS["copies"] = STATS.get("copies", 0) + 1
            STATS["copied_nodes"] = STATS.get("copied_nodes", 0) + copied

    @rule(data=st.data(), recursive=st.booleans())
    def delete(self, data: st.DataObject, recursive: bool) -> None:
        rref, mref = self._ref(data)
        v = self._version(data, mref)
        self._mutate(
            f"delete({mref!r}, recursive={recursive}, if_version={v})",
            lambda: self.coord.delete(self.ns, rref, recursive=recursive, if_version=v),
            lambda: self.model.delete(mref, recursive=recursive, if_version=v),
        )

    @rule(data=st.data())
    def stat(self, data: st.DataObject) -> None:
        rref, mref = self._ref(data)
        self._read(
            f"stat({mref!r})",
            lambda: self.coord.stat(self.ns, rref) if rref.startswith("/")
            else self.coord.get(self.ns, rref),
            lambda: self.model.stat(mref),
        )

    @rule(data=st.data())
    def listdir(self, data: st.DataObject) -> None:
        p = self._path(data, depth=0)
        STATS["steps"] += 1
        try:
            got: list[tuple[str, str, int]] | str = [
                (n.name, n.kind, n.version) for n in self.coord.listdir(self.ns, p)
            ]
        except CoordinatorError as exc:
            got = type(exc).__name__
        try:
            want: list[tuple[str, str, int]] | str = [
                (v.name, v.kind, v.version) for v in self.model.listdir(p)
            ]
        except CoordinatorError as exc:
            want = type(exc).__name__
        assert got == want, f"listdir({p!r})"

    # ------------------------------------------------------ groups, import

    def _step(self, data: st.DataObject, careful: bool) -> Step:
        """One command drawn for a group, from the tree as it is before the group (so
        a later command may name what an earlier one moved or deleted); ``careful``:
        valid names, live nodes and right versions, most of which commit."""
        op = data.draw(st.sampled_from(
            ["mkdir", "mkdir -p", "create_file", "write_file", "set_metadata", "rename",
             "move", "delete", "copy"]), label="op")
        if op in ("mkdir", "mkdir -p"):
            parents = op == "mkdir -p"
            p = self._path(data, data.draw(st.integers(1, 2)) if parents else 1, careful)
            return (f"{op} {p!r}", Mkdir(p, parents),
                    lambda m: m.mkdir(p, parents=parents))
        if op == "create_file":
            p = self._path(data, 1, careful)
            content = data.draw(CONTENTS, label="content")
            metadata = data.draw(METADATA, label="metadata")
            return (f"create_file {p!r}", CreateFile(p, content, metadata),
                    lambda m: m.create_file(p, content, metadata))
        rref, mref = self._ref(data, careful, "file" if op == "write_file" else None)
        v = self._version(data, mref, careful)
        if op == "write_file":
            content = data.draw(CONTENTS, label="content")
            metadata = data.draw(METADATA, label="metadata")
            return (f"write_file {mref!r} v={v}", WriteFile(rref, content, metadata, v),
                    lambda m: m.write_file(mref, content, metadata, if_version=v))
        if op == "set_metadata":
            md = data.draw(st.fixed_dictionaries({"k": st.integers(0, 3)}), label="md")
            return (f"set_metadata {mref!r} v={v}", SetMetadata(rref, md, v),
                    lambda m: m.set_metadata(mref, md, if_version=v))
        if op == "rename":
            name = self._fresh_name(data) if careful else data.draw(NAMES, label="name")
            return (f"rename {mref!r} {name!r} v={v}", Rename(rref, name, v),
                    lambda m: m.rename(mref, name, if_version=v))
        if op == "move":
            dst = self._path(data, 1, careful)
            return (f"move {mref!r} {dst!r} v={v}", Move(rref, dst, v),
                    lambda m: m.move(mref, dst, if_version=v))
        if op == "copy":
            to = self._path(data, 0, careful)
            name = self._fresh_name(data) if careful else data.draw(NAMES, label="name")
            return (f"copy {mref!r} {to!r} {name!r} v={v}", Copy(rref, to, name, v),
                    lambda m: m.copy(mref, to, name, if_version=v))
        recursive = careful or data.draw(st.booleans(), label="recursive")
        return (f"delete {mref!r} r={recursive} v={v}", Delete(rref, recursive, v),
                lambda m: m.delete(mref, recursive=recursive, if_version=v))

    @rule(data=st.data(), how=st.sampled_from(["apply", "transaction"]))
    def group(self, data: st.DataObject, how: str) -> None:
        """Two to four commands in one transaction: the same results as the model's,
        or the same error from the same command with nothing written (a twin of a rule
        on the group's path that drifted from the one a lone call runs shows here)."""
        # Careful steps but at most one drawn from anything (a stale version, a bad
        # name, a deleted node...): the group fails, if it does, at that step.
        n = data.draw(st.integers(2, 4), label="n")
        wild = data.draw(st.integers(-1, n - 1), label="wild")
        steps = [self._step(data, careful=i != wild) for i in range(n)]
        what = f"group via {how}: {[label for label, _, _ in steps]}"
        STATS["steps"] += 1
        STATS["groups"] += 1
        commands = [command for _, command, _ in steps]
        real: list[MutationResult] = []
        r_err: CoordinatorError | None = None
        m_err: CoordinatorError | None = None
        try:
            if how == "apply":
                real = self.coord.apply(self.ns, commands)
            else:
                with self.coord.transaction(self.ns) as tx:
                    real = [tx.execute(command) for command in commands]
        except CoordinatorError as exc:
            r_err = exc
        try:
            model = self.model.group([step for _, _, step in steps])
        except CoordinatorError as exc:
            m_err = exc
        events = self._read_new()
        if r_err is not None or m_err is not None:
            assert type(r_err) is type(m_err), f"{what}: coordinator {r_err!r}, model {m_err!r}"
            assert r_err is not None and m_err is not None
            if how == "apply":
                assert r_err.index == m_err.index, f"{what}: failed at {r_err.index}, " \
                    f"model at {m_err.index}"
            assert events == [], f"{what}: a refused group appended {events}"
            STATS["groups_refused"] += 1
            label = f"group: {type(r_err).__name__}"
            ERRORS[label] = ERRORS.get(label, 0) + 1
            return
        for (label, _, _), r, m in zip(steps, real, model, strict=True):
            self._same_node(f"{what}, {label}", r.node, m.node)
            assert (r.seq is None) == (m.events == 0), f"{what}, {label}: seq {r.seq}"
        assert len(events) == sum(m.events for m in model), f"{what}: {len(events)} events"
        if events:
            blocks = {e.position // POSITION_BLOCK for e in events}
            assert len(blocks) == 1, f"{what}: one group's events span transactions {blocks}"
            seqs = [r.seq for r in real if r.seq is not None]
            assert seqs == sorted(seqs) and seqs[-1] == events[-1].position, what

    @rule(data=st.data())
    def import_nodes(self, data: st.DataObject) -> None:
        """One to four import lines (some below a file, some existing, some twice):
        the same nodes as the model's import, or both refuse with nothing written."""
        lines: list[dict[str, Any]] = []
        for _ in range(data.draw(st.integers(1, 4), label="lines")):
            if lines and data.draw(st.integers(0, 11), label="again") == 0:
                lines.append(dict(lines[-1]))
                continue
            fresh = data.draw(st.integers(0, 4), label="fresh") > 0
            line: dict[str, Any] = {
                "path": self._path(data, data.draw(st.integers(1, 2), label="depth"), fresh),
                "kind": data.draw(st.sampled_from(["dir", "file"]), label="kind"),
            }
            if line["kind"] == "file":
                line["content"] = data.draw(CONTENTS, label="content")
                md = data.draw(METADATA, label="metadata")
                if md is not None:
                    line["metadata"] = md
            lines.append(line)
        what = f"import {lines!r}"
        STATS["steps"] += 1
        STATS["imports"] += 1
        r_err: CoordinatorError | None = None
        m_err: CoordinatorError | None = None
        try:
            made = self.coord.import_nodes(
                self.ns, [json.dumps(line, ensure_ascii=False) for line in lines]).created
        except CoordinatorError as exc:
            r_err = exc
        try:
            want = self.model.import_lines(lines)
        except CoordinatorError as exc:
            m_err = exc
        events = self._read_new()
        if r_err is not None or m_err is not None:
            assert type(r_err) is type(m_err), f"{what}: coordinator {r_err!r}, model {m_err!r}"
            assert events == [], f"{what}: a refused import appended {events}"
            STATS["imports_refused"] += 1
            label = f"import: {type(r_err).__name__}"
            ERRORS[label] = ERRORS.get(label, 0) + 1
            return
        assert made == want == len(events), f"{what}: made {made}, model {want}, " \
            f"{len(events)} events"

    # -------------------------------------------------------- invariants

    @invariant()
    def trees_equal(self) -> None:
        real = list(self.coord.walk(self.ns))
        model = self.model.walk()
        got = [(n.path, n.kind, n.version, n.content, n.metadata) for n in real]
        want = [(v.path, v.kind, v.version, v.content, v.metadata) for v in model]
        assert got == want, "walk differs from the model"
        for n, v in zip(real, model, strict=True):
            self._same_node(f"walk {v.path}", n, v)
        table = {
            n.id: (n.parent_id, n.name, n.kind, n.version, n.content, n.metadata) for n in real
        }
        assert self.fold.trees[self.ns].rows() == table, "folded event log differs from tree"


    def teardown(self) -> None:
        """At the end of an example, replay's and verify's fold (``indexer.setfold``)
        must rebuild the same tree from the same log."""
        table = {
            n.id: (n.parent_id, n.name, n.kind, n.version, n.content, n.metadata)
            for n in self.coord.walk(self.ns)
        }
        assert setfold_rows(self.coord.engine, self.ns) == table, "setfold differs from tree"


def test_coordinator_agrees_with_model(coord: Coordinator, long_run: bool) -> None:
    TreeMachine.coord = coord
    run_state_machine_as_test(
        TreeMachine,
        settings=settings(
            max_examples=400 if long_run else 25,
            stateful_step_count=60 if long_run else 30,
            deadline=None,
            database=None,  # no .hypothesis/ in the repo; failures print their steps
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    print(f"\nmodel-based: {STATS}\nerrors: {ERRORS}")
    assert STATS["steps"] > 0


@pytest.mark.parametrize("max_depth", [3])
def test_model_depth_limit_agrees(database_url: str, max_depth: int) -> None:
    """The model's depth rule is the coordinator's with a small configured limit."""
    model = Namespace(max_depth=max_depth)
    with Coordinator.connect(database_url, max_depth=max_depth) as c:
        c.create_namespace("d")
        for p in ["/a", "/a/b", "/a/b/c", "/a/b/c/d"]:
            try:
                got: str = c.mkdir("d", p).node.path
            except CoordinatorError as exc:
                got = type(exc).__name__
            try:
                want: str = model.mkdir(p).node.path
            except CoordinatorError as exc:
                want = type(exc).__name__
            assert got == want, p
        assert want == "InvalidPath"
