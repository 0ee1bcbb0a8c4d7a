"""Name and path rules: pure functions, no database.

Names are stored NFC-normalized, so the NFC and NFD spellings of one name are the
same name (a second create gets AlreadyExists), as on macOS and with git's
core.precomposeUnicode. Control characters (C0, DEL, C1) are refused: they have no
use in a path and break terminals, logs and query syntaxes downstream.
"""

from __future__ import annotations

import unicodedata

from .errors import InvalidName, InvalidPath

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
MAX_DEPTH = 256
#: A file's content, in bytes of UTF-8 as stored (``Settings.max_content_bytes``). Every
#: file is one document in the search index, and a document must fit in one request to
#: it (Elasticsearch's ``http.max_content_length``, 100 MB by default): JSON escaping
#: can make content up to six times larger (a control character is ``\u0001``), and
#: 8 MiB stays below that limit even then.
MAX_CONTENT_BYTES = 8 * 1024 * 1024

# The depth and length limits are for paths that name a NEW node (mkdir, create, the
# destination of a move). An O(1) directory move can take existing descendants past
# them, and such nodes must stay reachable, so looking up an EXISTING node accepts
# paths up to these much larger caps (only there to bound the work of one request).
LOOKUP_MAX_PATH_BYTES = 1 << 20
LOOKUP_MAX_DEPTH = 1 << 15


def _as_text(value: object, what: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidName(f"{what} is not valid UTF-8") from exc
    if not isinstance(value, str):
        raise InvalidName(f"{what} must be a string, not {type(value).__name__}")
    return value


def validate_name(value: object) -> str:
    """Return the normalized name, or raise InvalidName saying what is wrong."""
    name = _as_text(value, "name")
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
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidName(f"name is longer than {MAX_NAME_BYTES} bytes in UTF-8")
    return name


def split_path(
    value: object, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_PATH_BYTES
) -> list[str]:
    """Split an absolute normalized path into validated names; '/' is []."""
    path = _as_text(value, "path")
    if not path.startswith("/"):
        raise InvalidPath(f"path {path!r} is not absolute")
    if path == "/":
        return []
    if path.endswith("/"):
        raise InvalidPath("path ends with '/'")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidName("path is not valid Unicode (lone surrogate)") from exc
    if size > max_bytes:
        raise InvalidPath(f"path is longer than {max_bytes} bytes")
    parts = path[1:].split("/")
    if "" in parts:
        raise InvalidPath("path contains an empty component ('//')")
    if len(parts) > max_depth:
        raise InvalidPath(f"path is deeper than {max_depth}")
    return [validate_name(p) for p in parts]


def join_path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def lookup_path(value: object) -> list[str]:
    """Split the path of an existing node (see LOOKUP_MAX_DEPTH)."""
    return split_path(value, LOOKUP_MAX_DEPTH, LOOKUP_MAX_PATH_BYTES)


def parent_and_name(value: object, max_depth: int = MAX_DEPTH) -> tuple[list[str], str]:
    """Split the path of a node about to be created (or moved there), within the limits."""
    parts = split_path(value, max_depth)
    if not parts:
        raise InvalidPath("the root has no parent")
    return parts[:-1], parts[-1]


def is_path_ref(ref: object) -> bool:
    """A node reference starting with '/' is a path; anything else is a node id."""
    return isinstance(ref, (str, bytes)) and _as_text(ref, "reference").startswith("/")


NAMESPACE_MAX = 128


def validate_namespace(value: object) -> str:
    """Namespaces appear in URLs, routing keys and logs: keep them to a safe alphabet."""
    ns = _as_text(value, "namespace")
    ok = (
        0 < len(ns) <= NAMESPACE_MAX
        and ns[0].isascii()
        and ns[0].isalnum()
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in ns)
    )
    if not ok:
        raise InvalidName(
            "namespace must be 1-128 ASCII letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return ns
