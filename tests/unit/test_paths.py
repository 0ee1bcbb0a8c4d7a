"""Name and path rules (``coordinator.paths``): pure functions."""

from __future__ import annotations

import unicodedata

import pytest

from coordinator.errors import InvalidName, InvalidPath
from coordinator.paths import (
    MAX_DEPTH,
    MAX_NAME_BYTES,
    is_path_ref,
    join_path,
    parent_and_name,
    split_path,
    validate_name,
    validate_namespace,
)


def test_names_are_stored_nfc() -> None:
    nfd = unicodedata.normalize("NFD", "café")
    assert nfd != "café" and validate_name(nfd) == "café"
    assert validate_name("café".encode()) == "café"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("", "empty"),
        (".", "reserved"),
        ("..", "reserved"),
        ("a/b", "'/'"),
        ("a\x00b", "NUL"),
        ("a\x1fb", "control character"),
        ("a\x85b", "control character"),
        ("x" * (MAX_NAME_BYTES + 1), "longer than"),
        ("\ud800", "surrogate"),
        (b"\xff", "UTF-8"),
        (7, "must be a string"),
    ],
)
def test_a_bad_name_says_what_is_wrong(bad: object, says: str) -> None:
    with pytest.raises(InvalidName, match=says):
        validate_name(bad)


def test_paths_split_and_join_back() -> None:
    assert split_path("/") == []
    assert split_path("/a/b") == ["a", "b"]
    assert join_path(split_path("/a/b")) == "/a/b"
    assert parent_and_name("/a/b") == (["a"], "b")
    assert is_path_ref("/a") and not is_path_ref("3f1c0000-0000-4000-8000-000000000000")


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("a/b", "not absolute"),
        ("/a/", "ends with"),
        ("/a//b", "empty component"),
        ("/" + "/".join(["d"] * (MAX_DEPTH + 1)), "deeper than"),
    ],
)
def test_a_bad_path_says_what_is_wrong(bad: str, says: str) -> None:
    with pytest.raises(InvalidPath, match=says):
        split_path(bad)


def test_the_root_has_no_parent() -> None:
    with pytest.raises(InvalidPath, match="root"):
        parent_and_name("/")


def test_namespaces_keep_to_a_safe_alphabet() -> None:
    assert validate_namespace("team-a.b_1") == "team-a.b_1"
    for bad in ["", "-a", "a b", "é", "x" * 129]:
        with pytest.raises(InvalidName, match="namespace"):
            validate_namespace(bad)
