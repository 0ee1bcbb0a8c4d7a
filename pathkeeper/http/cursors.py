"""Opaque list cursors (the last name of a page), shared by the app and the client."""

from __future__ import annotations

import base64
import binascii


class InvalidCursor(ValueError):
    """The cursor was not produced by this API."""


def encode_name_cursor(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode().rstrip("=")


def decode_name_cursor(cursor: str) -> str:
    try:
        name = base64.b64decode(
            cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True
        ).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor(str(exc)) from exc
    if not name:
        raise InvalidCursor("empty cursor")
    return name
