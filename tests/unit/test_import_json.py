"""An import's lines are parsed by ``loads_line``, a shortcut to the JSON decoder's
scanner: for every line it gives what ``json.loads`` gives, the same value or the same
error (class and message), so the import's answers do not change with it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.importer import loads_line

LINES: list[bytes | str] = [
    b'{"path": "/a", "kind": "dir"}', '{"path": "/a", "kind": "dir"}',
    b'{"path": "/caf\\u00e9"}', '{"path": "/caf\u00e9"}'.encode(), b"{}", b"{} \r",
    b'{"a": 1}\r', b' {"a": 1}', b'{"a": 1} x', b'{"a": 1}{}', b"{", b"{\x00", b"[1]", b"1",
    b"", b"   ", b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-16-le"),
    '{"a": 1}'.encode("utf-32"), b'{"a": "\xff"}', b'{"a": "\xed\xa0\x80"}',
    b'{"a": "\\ud800"}', b'{"a": NaN}', b'{"a": 1, "a": 2}', b'{"a": "x\ty"}',
    b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "{\u2028}", '{"a": 1}\u00a0',
]


def outcome(loads: object, line: bytes | str) -> tuple[str, object]:
    try:
        return "ok", loads(line)  # type: ignore[operator]
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("line", LINES)
def test_same_as_json_loads(line: bytes | str) -> None:
    assert outcome(loads_line, line) == outcome(json.loads, line)


@given(st.one_of(st.binary(max_size=40), st.text(max_size=40),
                 st.text(max_size=40).map(lambda t: ("{" + t).encode("utf-8", "surrogatepass")),
                 st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5),
                                 max_size=3).map(lambda d: json.dumps(d) + " ")))
def test_same_as_json_loads_for_any_line(line: bytes | str) -> None:
    assert outcome(loads_line, line) == outcome(json.loads, line)
