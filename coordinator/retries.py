"""When a transaction that failed may run again, and how long to wait first: one rule
for the ``Coordinator``'s blocking calls and for ``AsyncStatements``.

A transient race runs again, with backoff, up to ``Settings.max_retries`` times: the
tree's own ``Retry`` (a race the rule detects), a deadlock or serialization failure,
and a connection found dead before anything was sent (``Disconnected``). Anything else
is raised as its typed error (``db.translate``).
"""

from __future__ import annotations

import random

from sqlalchemy.exc import DBAPIError

from .db import is_retryable, translate
from .errors import Conflict


class Retry(Exception):
    """The transaction raced with another one in a way that a re-run resolves (a rule
    detected it: a name a concurrent ``mkdir -p`` made first, a create under a subtree
    being deleted). A signal between the tree and the retry loop: ``check_retry`` turns
    it into ``Conflict`` once the retries are spent, so it never leaves a call."""


class Disconnected(Exception):
    """The connection died before COMMIT: nothing applied, the transaction may run again.
    A signal to the retry loop, like ``Retry``: it leaves a call as its typed error."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


def backoff_seconds(attempt: int) -> float:
    """How long to wait before attempt ``attempt + 1``: doubling from 2 ms, capped at
    0.2 s, jittered so that racing clients do not meet again."""
    return min(0.2, 0.002 * 2.0**attempt) * (0.5 + random.random())


def check_retry(exc: Exception, attempt: int, max_retries: int) -> None:
    """Return if the failure ``exc`` of attempt ``attempt`` (from 0) may run again;
    otherwise raise what the caller gets (``exc`` itself when it is not a transient race
    or a driver error)."""
    last = attempt >= max_retries
    if isinstance(exc, Retry):
        if last:
            raise Conflict("gave up after repeated conflicting changes")
        return
    if isinstance(exc, Disconnected):
        if last:
            raise translate(exc.error) from exc.error
        return
    if isinstance(exc, DBAPIError):
        if not is_retryable(exc) or last:
            raise translate(exc) from exc
        return
    raise exc

