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
    # Numbers and nesting at the edges: integers past 64 bits, floats past the range of
    # a double or below its smallest, JSON's invalid number forms, nesting past 1,024;
    # escapes of NUL and of a surrogate pair, a BOM inside a string, repeated keys.
    b'{"a": 18446744073709551615}', b'{"a": 18446744073709551616}',
    b'{"a": -9223372036854775809}', b'{"a": 123456789012345678901234567890}',
    b'{"a": 1e400}', b'{"a": -1e400}', b'{"a": 1e-400}', b'{"a": 5e-324}', b'{"a": -0.0}',
    b'{"a": -0}', b'{"a": 1.7976931348623157e308}', b'{"a": 0.1e1}', b'{"a": 1E+2}',
    b'{"a": 01}', b'{"a": 1.}', b'{"a": .5}', b'{"a": +1}',
    b'{"a": ' + b"[" * 1_100 + b"]" * 1_100 + b"}", b'{"a": "\\u0000"}',
    b'{"a": "\\ud83d\\ude00"}', '{"a": "\ufeff"}'.encode(), b'{"a": 1,}', b'{"a" 1}',
    b'{"a": true, "b": false, "c": null}', b'{"a": tru}', b'{"a": "x", "a": "y"}',
    b'{"a": "x", "a": 1}', b'{"a": null, "b": "\\u00e9"}', b'{"a": "x"} \t',
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


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4), st.booleans())
def test_same_as_json_loads_for_any_object(obj: dict[str, object], ascii_only: bool) -> None:
    """Objects of every JSON type, integers of any size and floats of any magnitude
    among them, written escaped or as UTF-8: the same value either way."""
    line = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert outcome(loads_line, line) == outcome(json.loads, line)
