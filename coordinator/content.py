"""What a file's content and a node's metadata may be: checked in Python before any
statement is sent, for every write path (a command alone, in a group, an import)."""

from __future__ import annotations

import json
from typing import Any

from . import paths
from .errors import InvalidContent, TooLarge


def check_content(content: object, max_bytes: int = paths.MAX_CONTENT_BYTES) -> str:
    """``content`` if a file may hold it, else ``InvalidContent`` or, past ``max_bytes``
    bytes of UTF-8, ``TooLarge``: the one content rule of every write path."""
    if not isinstance(content, str):
        raise InvalidContent("content must be a string")
    if "\x00" in content:
        raise InvalidContent("content contains NUL")
    if content.isascii():  # its length in UTF-8 without encoding it
        size = len(content)
    else:
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidContent("content is not valid Unicode") from exc
    if size > max_bytes:
        raise TooLarge(f"content is {size} bytes, more than the limit of {max_bytes}")
    return content


#: How deep metadata may nest: the metadata object is level 1, each object or array
#: inside it one more. Real metadata has a few levels; the bound keeps every recursive
#: reader of a stored value (Python's json, the HTTP layer's models and answers,
#: Elasticsearch's parser) far from its own limit, and refuses a hostile value with a
#: typed error before any of them meets it.
MAX_METADATA_DEPTH = 100


def metadata_too_deep(what: str = "metadata") -> InvalidContent:
    return InvalidContent(f"{what} nested deeper than {MAX_METADATA_DEPTH} levels")


def _check_metadata_values(metadata: dict[Any, Any]) -> None:
    """Refuse NUL in any key or string, and nesting past ``MAX_METADATA_DEPTH``: one
    walk with a stack of its own, since recursion would fail on the values it refuses."""
    stack: list[tuple[Any, int]] = [(metadata, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise metadata_too_deep()
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in items:
            if (isinstance(key, str) and "\x00" in key) or (
                isinstance(item, str) and "\x00" in item
            ):
                # jsonb cannot hold NUL; the text "\u0000" (a backslash and five
                # letters) is fine.
                raise InvalidContent("metadata contains NUL")
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, depth + 1))


def metadata_json(metadata: object) -> str:
    if not isinstance(metadata, dict):
        raise InvalidContent("metadata must be a JSON object")
    _check_metadata_values(metadata)
    try:
        dumped = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
        dumped.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidContent(f"metadata is not valid JSON: {exc}") from exc
    return dumped
