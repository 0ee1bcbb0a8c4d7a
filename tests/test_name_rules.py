"""The name and path rules, one implementation (``coordinator.paths``) for every path
that takes a name: the API, groups and the import, whose parser calls
``paths.checked_path`` (the path in NFC with its names; ``split_path`` gives the names).

``checked_path`` runs the rules that hold per character (lone surrogates, control
characters, NFC) once over the whole path; these properties check, over many generated
names and paths, that this is the same as the plain rule applied name by name: the
reference below, the rule as the README states it, written the slow obvious way.
No database.
"""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator import paths
from coordinator.errors import InvalidImport, InvalidName, InvalidPath
from coordinator.importer import parse_line


def reference_name(name: str) -> str:
    """A name's rule, character by character after NFC, in the order the README gives."""
    if name == "":
        raise InvalidName("name is empty")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidName("name is not valid Unicode (lone surrogate)") from exc
    name = unicodedata.normalize("NFC", name)
    if name in (".", ".."):
        raise InvalidName(f"name {name!r} is reserved")
    if "/" in name:
        raise InvalidName("name contains '/'")
    if "\x00" in name:
        raise InvalidName("name contains NUL")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise InvalidName("name contains a control character")
    if len(name.encode("utf-8")) > paths.MAX_NAME_BYTES:
        raise InvalidName(f"name is longer than {paths.MAX_NAME_BYTES} bytes in UTF-8")
    return name


def outcome(fn: object, *args: object) -> tuple[str, object]:
    try:
        return "ok", fn(*args)  # type: ignore[operator]
    except InvalidName as exc:
        return "refused", str(exc)


# Characters at the edges of the rules: ASCII, '/', '.', NUL, C0, DEL, C1, the first
# character past C1, letters that NFC composes or decomposes ("e" + U+0301, U+00E9,
# U+212B Angstrom -> U+00C5, U+0344 -> U+0308 U+0301, Hangul jamo), a lone surrogate,
# characters of 2, 3 and 4 bytes in UTF-8.
EDGE = st.sampled_from([
    "a", "Z", "0", "-", " ", "/", ".", "\x00", "\x01", "\x1f", "\x7f", "\x80", "\x9f",
    "\xa0", "e", "\u0301", "\u00e9", "\u212b", "\u0344", "\u1100", "\u1161", "\u11a8",
    "\ud800", "\u00df", "\u20ac", "\U0001f600", "\u0338", "\u2215",
])
NAMES = st.one_of(
    st.text(EDGE, max_size=8),
    st.text(max_size=8),
    # Around the length limit: 63-66 four-byte characters, 250-260 ASCII letters.
    st.integers(60, 66).map(lambda n: "\U0001f600" * n),
    st.integers(250, 260).map(lambda n: "x" * n),
    st.integers(0, 4).map(lambda n: "\u00e9" * 126 + "e\u0301" * n),
)


@settings(max_examples=800, deadline=None)
@given(NAMES)
@example("e\u0301" * 128)  # 384 bytes as given, 256 in NFC: too long either way
@example("e\u0301" * 127)  # 381 bytes as given, 254 in NFC: fits
def test_validate_name_is_the_rule(name: str) -> None:
    assert outcome(paths.validate_name, name) == outcome(reference_name, name)


@settings(max_examples=800, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=6))
def test_a_path_is_its_names(names: list[str]) -> None:
    """A path is accepted exactly when each of its names is, as the names' NFC forms;
    a path with one bad name is refused in that name's words."""
    path = "/" + "/".join(names)
    got = outcome(paths.split_path, path)
    if path == "/":
        assert got == ("ok", [])
        return
    structural = (path.endswith("/") or "//" in path
                  or len(path.encode("utf-8", "surrogatepass")) > paths.MAX_PATH_BYTES)
    if structural:
        assert got[0] == "refused"
        return
    each = [outcome(reference_name, n) for n in path[1:].split("/")]
    refused = [said for state, said in each if state == "refused"]
    if not refused:
        assert got == ("ok", [name for _, name in each])
    else:
        assert got[0] == "refused"
        if len(set(refused)) == 1 and "surrogate" not in refused[0]:
            assert got[1] == refused[0]


@settings(max_examples=300, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=4))
def test_the_import_takes_the_same_names(names: list[str]) -> None:
    """An import line's path gives the names ``split_path`` gives, or its refusal; its
    path, parent, name and depth are those names'."""
    path = "/" + "/".join(names)
    line = json.dumps({"path": path, "kind": "dir"})
    expected = outcome(paths.split_path, path, paths.MAX_DEPTH)
    try:
        parsed = parse_line(line, paths.MAX_DEPTH)
    except InvalidImport:  # the root: a valid path, but not one to import
        assert expected == ("ok", [])
        return
    except InvalidName as exc:
        assert expected == ("refused", str(exc))
        return
    assert expected[0] == "ok"
    names_: list[str] = expected[1]  # type: ignore[assignment]
    assert parsed[0] == paths.join_path(names_)
    assert parsed[1:3] == (paths.join_path(names_[:-1]), names_[-1])
    assert parsed[6] == len(names_)


@pytest.mark.parametrize(("path", "error"), [
    ("a", InvalidPath), ("/a/", InvalidPath), ("/a//b", InvalidPath),
    ("/" + "/".join(["a"] * (paths.MAX_DEPTH + 1)), InvalidPath),
    ("/" + "x" * paths.MAX_PATH_BYTES, InvalidPath),
    ("/a/..", InvalidName), ("/a/b\x07", InvalidName), ("/\ud800", InvalidName),
])
def test_path_refusals(path: str, error: type[InvalidName]) -> None:
    with pytest.raises(error):
        paths.split_path(path)
