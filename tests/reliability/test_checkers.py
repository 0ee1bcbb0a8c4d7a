"""The checkers themselves can fail: each violation they exist for, on synthetic input.

(Pure: no database. Without these, a checker that accepts everything would make
the history and model tests pass for nothing.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from coordinator.results import POSITION_BLOCK

from .fold_check import Fold, FoldError
from .history_check import Call, Ev, check_history

ROOT, A, B = "r", "a", "b"
B1, B2, B3 = POSITION_BLOCK, 2 * POSITION_BLOCK, 3 * POSITION_BLOCK


@dataclass
class E:
    position: int
    type: str
    node_id: str | None
    payload: dict[str, Any]
    namespace: str = "n"


def created(pos: int, nid: str, parent: str, name: str, path: str) -> E:
    return E(pos, "created", nid, {
        "id": nid, "parent_id": parent, "name": name, "kind": "dir", "path": path,
        "content": None, "metadata": {}, "version": 1,
    })


def base_log() -> list[E]:
    return [
        E(1, "namespace_created", ROOT, {"root_id": ROOT}),
        created(B1, A, ROOT, "a", "/a"),
        created(B2, B, A, "b", "/a/b"),
    ]


def test_fold_accepts_a_consistent_log() -> None:
    fold = Fold()
    fold.apply_all(base_log())
    assert set(fold.trees["n"].nodes) == {ROOT, A, B}


@pytest.mark.parametrize(
    "bad",
    [
        created(B3, A, ROOT, "x", "/x"),  # id reused
        created(B3, "c", B, "c", "/a/b/d"),  # wrong path
        created(B3, "c", ROOT, "a", "/a"),  # name taken
        E(B3, "moved", A, {"id": A, "kind": "dir", "old_parent_id": ROOT, "old_name": "a",
                           "old_path": "/a", "parent_id": B, "name": "z", "path": "/a/b/z",
                           "version": 2}),  # into its own subtree
        E(B3, "deleted", A, {"id": A, "kind": "dir", "path": "/a", "recursive": True,
                             "count": 1, "version": 1}),  # count is 2
        E(B3, "written", A, {"id": A, "path": "/a", "content": "", "metadata": {},
                             "version": 2}),  # a directory
        E(5, "created", "c", {}),  # position not after the last
    ],
)
def test_fold_rejects(bad: E) -> None:
    fold = Fold()
    fold.apply_all(base_log())
    with pytest.raises(FoldError):
        fold.apply(bad)


def ack(n: int, op: str, args: list[Any], seq: int | None, nid: str, path: str) -> Call:
    return Call("c0", n, op, args, {}, {"ret": n, "ok": True, "seq": seq, "id": nid,
                                         "kind": "dir", "version": 1, "path": path})


def evs() -> list[Ev]:
    return [Ev(e.position, e.type, e.node_id, e.payload) for e in base_log()]


def test_history_explained() -> None:
    calls = [ack(0, "mkdir", ["/a"], B1, A, "/a"), ack(1, "mkdir", ["/a/b"], B2, B, "/a/b")]
    assert check_history(calls, evs(), [1]).violations == []


def test_history_lost_acknowledged_change() -> None:
    calls = [ack(0, "mkdir", ["/a"], B1, A, "/a"), ack(1, "mkdir", ["/a/b"], B2, B, "/a/b"),
             ack(2, "mkdir", ["/c"], B3, "c", "/c")]
    assert any("lost" in v for v in check_history(calls, evs(), [1]).violations)


def test_history_change_nobody_acknowledged() -> None:
    calls = [ack(0, "mkdir", ["/a"], B1, A, "/a")]
    assert any("nobody" in v for v in check_history(calls, evs(), [1]).violations)


def test_history_killed_call_may_have_committed() -> None:
    in_flight = Call("c1", 0, "mkdir", ["/a/b"], {})  # killed before its result line
    calls = [ack(0, "mkdir", ["/a"], B1, A, "/a"), in_flight]
    rep = check_history(calls, evs(), [1])
    assert rep.violations == [] and rep.counters["in_flight_committed"] == 1


def test_history_wrong_event_type_and_untyped_error() -> None:
    wrong = ack(0, "delete", ["/a"], B1, A, "/a")
    crash = Call("c0", 1, "stat", ["/a"], {}, {"ret": 1, "ok": False, "crash": "KeyError()"})
    rep = check_history([wrong, crash, ack(2, "mkdir", ["/a/b"], B2, B, "/a/b")], evs(), [1])
    assert len(rep.violations) >= 2
