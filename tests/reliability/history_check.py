"""Checks a recorded concurrent history against the event log (pure: no database).

Input: the clients' JSON-lines logs and every event of the namespace. Output: a
list of violations (empty when the history is explained) and counters for the
report. The rules:

* every acknowledged mutation (a result with a ``seq``) has its event at that
  position, of the right type, for the returned node id and version; its
  transaction holds only that event (several ``created`` for ``mkdir -p``);
* every transaction in the log was acknowledged by some client, except at most
  one per operation whose outcome the client never learnt (killed in flight, or
  ``Unavailable``), and then its events must be that operation's;
* no call raised anything but a ``CoordinatorError``.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.results import POSITION_BLOCK

from .history_client import EVENT_TYPE


@dataclass
class Call:
    client: str
    n: int
    op: str
    args: list[Any]
    kw: dict[str, Any]
    ret: dict[str, Any] | None = None  # None: the client never learnt the outcome


@dataclass
class Ev:
    position: int
    type: str
    node_id: str | None
    payload: dict[str, Any]


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)


def read_log(path: Path) -> list[Call]:
    """The calls of one client incarnation; a torn last line (killed mid-write) is dropped."""
    calls: dict[int, Call] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "call" in rec:
            calls[rec["call"]] = Call(path.stem, rec["call"], rec["op"], rec["args"], rec["kw"])
        else:
            calls[rec["ret"]].ret = rec
    return list(calls.values())


def _nfc(p: object) -> object:
    return unicodedata.normalize("NFC", p) if isinstance(p, str) else p


def _explains(call: Call, events: list[Ev]) -> bool:
    """Whether ``events`` (one transaction) could be the effect of ``call``."""
    want = EVENT_TYPE.get(call.op)
    if want is None or any(e.type != want for e in events):
        return False
    if call.op != "mkdir" and len(events) != 1:
        return False
    first, last = events[0].payload, events[-1].payload
    ref = _nfc(call.args[0])
    if call.op in ("mkdir", "create_file"):
        return bool(last["path"] == ref)
    where = first["old_path"] if call.op in ("move", "rename") else first["path"]
    return bool(where == ref or events[0].node_id == ref)


def check_history(calls: list[Call], events: list[Ev], setup_seqs: list[int]) -> Report:
    rep = Report()
    by_pos = {e.position: e for e in events}
    blocks: dict[int, list[Ev]] = {}
    for e in sorted(events, key=lambda e: e.position):
        blocks.setdefault(e.position // POSITION_BLOCK, []).append(e)
    explained = {s // POSITION_BLOCK for s in setup_seqs}
    uncertain: list[Call] = []
    for c in calls:
        rep.counters["calls"] += 1
        r = c.ret
        if r is None:
            rep.counters["in_flight_at_kill"] += 1
            uncertain.append(c)
            continue
        if "crash" in r:
            rep.violations.append(f"{c.client}#{c.n} {c.op}{c.args}: untyped {r['crash']}")
            continue
        if not r["ok"]:
            rep.counters[f"error:{r['err']}"] += 1
            if r["err"] == "Unavailable":
                uncertain.append(c)
            continue
        if c.op not in EVENT_TYPE:
            rep.counters["reads"] += 1
            continue
        if r["seq"] is None:
            rep.counters["no_ops"] += 1
            continue
        rep.counters["acknowledged_mutations"] += 1
        what = f"{c.client}#{c.n} {c.op}{c.args} -> seq {r['seq']}"
        ev = by_pos.get(r["seq"])
        if ev is None:
            rep.violations.append(f"{what}: acknowledged but no event at its seq (lost)")
            continue
        block = blocks[ev.position // POSITION_BLOCK]
        if ev.type != EVENT_TYPE[c.op] or ev.node_id != r["id"]:
            rep.violations.append(f"{what}: event is {ev.type} of {ev.node_id}, result {r['id']}")
        if ev.payload.get("version") != r["version"] or ev.payload.get("path") != r["path"]:
            rep.violations.append(f"{what}: event payload {ev.payload} differs from result {r}")
        if block[-1] is not ev or not _explains(c, block):
            rep.violations.append(f"{what}: its transaction holds other events {block}")
        explained.add(ev.position // POSITION_BLOCK)
    rep.counters["events"] = len(events)
    rep.counters["transactions"] = len(blocks)
    for b, evs in blocks.items():
        if b in explained:
            continue
        match = next((c for c in uncertain if _explains(c, evs)), None)
        if match is None:
            rep.violations.append(f"events nobody acknowledged, no in-flight call explains: {evs}")
            continue
        uncertain.remove(match)
        rep.counters["in_flight_committed"] += 1
    return rep
