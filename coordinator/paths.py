"""Name and path rules: pure functions, no database.

Names are stored NFC-normalized, so the NFC and NFD spellings of one name are the
same name (a second create gets AlreadyExists), as on macOS and with git's
core.precomposeUnicode. Control characters (C0, DEL, C1) are refused: they have no
use in a path and break terminals, logs and query syntaxes downstream.
"""

from __future__ import annotations

import re
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


#: Characters no name may hold: C0 (NUL among them), DEL and C1.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Below this many characters a name cannot pass ``MAX_NAME_BYTES`` (4 bytes each at
#: most), so its UTF-8 length need not be measured.
_SHORT_NAME = MAX_NAME_BYTES // 4


def _utf8_size(text: str, what: str) -> int:
    """The length of ``text`` in UTF-8; a lone surrogate (no UTF-8 form) is refused."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidName(f"{what} is not valid Unicode (lone surrogate)") from exc


def _nfc(text: str) -> str:
    """``text`` (a name, or a whole path) in NFC. Applied to a whole path at once this is
    the same as applied to each of its names: '/' is ASCII and composes with no
    neighbour, so the NFC form of a path is the path of its names' NFC forms."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


def _check_characters(text: str) -> None:
    """Refuse a control character (NUL among them) anywhere in ``text``: a name, or a
    whole path (the rule holds character by character)."""
    if _CONTROL.search(text) is not None:
        if "\x00" in text:
            raise InvalidName("name contains NUL")
        raise InvalidName("name contains a control character")


_RESERVED = frozenset({".", ".."})


def _check_reserved(name: str) -> None:
    if name == "":
        raise InvalidName("name is empty")
    if name in _RESERVED:
        raise InvalidName(f"name {name!r} is reserved")


def _check_length(name: str) -> None:
    if len(name) > _SHORT_NAME and len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidName(f"name is longer than {MAX_NAME_BYTES} bytes in UTF-8")


def validate_name(value: object) -> str:
    """Return the normalized name, or raise InvalidName saying what is wrong."""
    name = _as_text(value, "name")
    if name == "":
        raise InvalidName("name is empty")
    _utf8_size(name, "name")
    name = _nfc(name)
    _check_reserved(name)
    if "/" in name:
        raise InvalidName("name contains '/'")
    _check_characters(name)
    _check_length(name)
    return name


def split_path(
    value: object, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_PATH_BYTES
) -> list[str]:
    """Split an absolute normalized path into validated names; '/' is []. The names'
    rules are ``validate_name``'s (see ``checked_path``)."""
    return checked_path(value, max_depth, max_bytes)[1]


def checked_path(
    value: object, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_PATH_BYTES
) -> tuple[str, list[str]]:
    """The path in NFC and its validated names ('/' and [] for the root), or the error
    saying what is wrong. The rules that hold per character run once over the whole
    path (one pass instead of one per name: an import checks millions), and an ASCII
    path, the usual one, skips what cannot apply to it (its UTF-8 length is its length,
    it is its own NFC form)."""
    path = _as_text(value, "path")
    if not path.startswith("/"):
        raise InvalidPath(f"path {path!r} is not absolute")
    if path == "/":
        return path, []
    if path.endswith("/"):
        raise InvalidPath("path ends with '/'")
    ascii_ = path.isascii()
    if (len(path) if ascii_ else _utf8_size(path, "path")) > max_bytes:
        raise InvalidPath(f"path is longer than {max_bytes} bytes")
    if "//" in path:
        raise InvalidPath("path contains an empty component ('//')")
    if path.count("/") > max_depth:
        raise InvalidPath(f"path is deeper than {max_depth}")
    if not ascii_:
        path = _nfc(path)
    _check_characters(path)
    parts = path[1:].split("/")
    for name in parts:
        if name in _RESERVED or len(name) > _SHORT_NAME:  # the rare name that may break one
            _check_reserved(name)
            _check_length(name)
    return path, parts


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
