"""The typed events and their one wire form (``coordinator.events``): pure, no database."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

from coordinator import Event, InvalidEvent, UnknownEvent
from coordinator.events import (
    EVENT_TYPES,
    VERSION_KEY,
    Created,
    Deleted,
    DomainEvent,
    MetadataSet,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    Written,
    decode,
    encode,
    payload_keys,
    payload_sql,
)

ROOT, A, B = (f"00000000-0000-4000-8000-00000000000{i}" for i in range(3))

#: One event of every type the coordinator writes.
SAMPLES: list[DomainEvent] = [
    NamespaceCreated(root_id=ROOT),
    NamespaceDropped(root_id=ROOT, count=3),
    Created(id=A, parent_id=ROOT, name="a", kind="dir", path="/a", content=None,
            metadata={}, version=1),
    Created(id=B, parent_id=A, name="é", kind="file", path="/a/é", content="x\ny",
            metadata={"k": [1, {"n": None}]}, version=1),
    Written(id=B, path="/a/é", content="", metadata={"k": 2}, version=2),
    Written(id=B, path="/a/é", content="z", metadata=None, version=3),
    Moved(id=A, kind="dir", old_parent_id=ROOT, old_name="a", old_path="/a",
          parent_id=ROOT, name="b", path="/b", version=2),
    Deleted(id=A, kind="dir", path="/b", recursive=True, count=2, version=2),
    MetadataSet(id=A, path="/a", metadata={"owner": "ü", "n": [1]}, version=3),
]


def test_every_event_type_has_a_sample() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES.values())
    assert {cls.TYPE for cls in EVENT_TYPES.values()} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_its_wire_form(event: DomainEvent) -> None:
    type_, node_id, payload = encode(event)
    assert type_ == event.TYPE and node_id == event.node_id
    assert payload[VERSION_KEY] == event.VERSION
    # Through JSON, as the events table and the feed carry it.
    stored = json.loads(json.dumps(payload))
    assert decode(type_, node_id, stored) == event
    ev = Event.of(7, "ns", event, datetime.now(UTC))
    assert (ev.type, ev.node_id, ev.payload) == (type_, node_id, payload)
    assert ev.change == event
    assert ev.change is ev.change  # decoded once


def test_the_wire_shape_is_what_consumers_read() -> None:
    """The payload keys stay those written before events had classes: the feed's
    consumers and stored logs depend on them."""
    assert encode(SAMPLES[2])[2] == {
        "id": A, "parent_id": ROOT, "name": "a", "kind": "dir", "path": "/a",
        "content": None, "metadata": {}, "version": 1, "v": 1,
    }
    assert encode(SAMPLES[1]) == ("namespace_dropped", ROOT, {"count": 3, "v": 1})
    assert encode(SAMPLES[6])[2].keys() == {
        "id", "kind", "old_parent_id", "old_name", "old_path", "parent_id", "name", "path",
        "version", "v",
    }
    assert encode(SAMPLES[7])[2].keys() == {
        "id", "kind", "path", "recursive", "count", "version", "v",
    }
    assert payload_keys(NamespaceDropped) == ("count",)  # the root id is the node_id column


def test_a_payload_stored_before_versions_reads_as_version_1() -> None:
    # As the coordinator wrote it before payloads had a version.
    old = {"id": A, "kind": "dir", "old_parent_id": ROOT, "old_name": "a", "old_path": "/a",
           "parent_id": ROOT, "name": "b", "path": "/b", "version": 2}
    assert decode("moved", A, old) == SAMPLES[6]
    assert decode("namespace_created", ROOT, {"root_id": ROOT}) == SAMPLES[0]
    assert decode("namespace_dropped", ROOT, {"count": 3}) == SAMPLES[1]
    # A write without metadata leaves it unchanged.
    assert decode("written", B, {"id": B, "path": "/a/é", "content": "z", "version": 3}) \
        == SAMPLES[5]


def test_keys_a_reader_does_not_know_are_ignored() -> None:
    type_, node_id, payload = encode(SAMPLES[0])
    assert decode(type_, node_id, {**payload, "added_later": True}) == SAMPLES[0]


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        ("renamed", {"id": A}),
        ("", {}),
        ("moved", {**encode(SAMPLES[6])[2], "v": 2}),
        ("created", {**encode(SAMPLES[2])[2], "v": 0}),
        ("created", {**encode(SAMPLES[2])[2], "v": "1"}),
        ("created", {**encode(SAMPLES[2])[2], "v": True}),
    ],
)
def test_an_unknown_type_or_version_raises_unknown_event(
    type_: str, payload: dict[str, Any]
) -> None:
    with pytest.raises(UnknownEvent) as info:
        decode(type_, A, payload)
    assert info.value.code == "unknown_event"
    ev = Event(1, "ns", type_, A, payload, datetime.now(UTC))
    with pytest.raises(UnknownEvent):
        _ = ev.change
    assert ev.payload == payload  # the envelope stays readable


def test_an_unknown_version_names_the_version_found_and_the_one_read() -> None:
    """No upcasters: the log is rewritten by a migration when a payload changes
    (``coordinator.events``), so a reader meeting another version says which."""
    with pytest.raises(UnknownEvent) as info:
        decode("moved", A, {**encode(SAMPLES[6])[2], "v": 2})
    assert str(info.value) == "moved event: payload version 2 is not supported " \
        "(this code reads version 1)"


@pytest.mark.parametrize(
    ("type_", "node_id", "payload", "says"),
    [
        ("created", A, {"id": A, "name": "a"}, "'parent_id'"),
        ("deleted", A, {**encode(SAMPLES[7])[2], "count": "2"}, "count is '2', not an integer"),
        ("deleted", A, {**encode(SAMPLES[7])[2], "recursive": 1}, "not a boolean"),
        ("written", B, {**encode(SAMPLES[4])[2], "version": True}, "not an integer"),
        ("written", B, {**encode(SAMPLES[4])[2], "metadata": []}, "an object or null"),
        ("created", A, {**encode(SAMPLES[2])[2], "parent_id": None}, "not a string"),
        ("namespace_dropped", None, {"count": 1}, "root_id is None"),
    ],
)
def test_a_malformed_payload_raises_invalid_event(
    type_: str, node_id: str | None, payload: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode(type_, node_id, payload)
    assert not isinstance(info.value, UnknownEvent)
    assert says in str(info.value)


def test_bulk_sql_builds_the_payload_keys_of_its_class() -> None:
    columns = {k: f"c_{k}" for k in payload_keys(Deleted)}
    sql = payload_sql(Deleted, columns)
    assert sql.startswith("jsonb_build_object('id', c_id, 'kind', c_kind")
    assert sql.endswith(f"'{VERSION_KEY}', {Deleted.VERSION})")
    with pytest.raises(ValueError, match="payload keys"):
        payload_sql(Deleted, {**columns, "extra": "1"})
    with pytest.raises(ValueError, match="payload keys"):
        payload_sql(Deleted, {k: v for k, v in columns.items() if k != "path"})


def test_only_namespace_dropped_keeps_a_field_out_of_the_payload() -> None:
    for cls in EVENT_TYPES.values():
        names = tuple(f.name for f in fields(cls))
        expected = tuple(n for n in names if not (cls is NamespaceDropped and n == "root_id"))
        assert payload_keys(cls) == expected
