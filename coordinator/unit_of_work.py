"""One transaction on one namespace, and what must happen in it in which order.

A ``UnitOfWork`` owns the connection (its transaction is begun and ended by the
``Coordinator``), the tree operations over it (``tree``), the transaction's event
appender (``events``), and hooks that run once the events have their positions.

The order it keeps: every tree statement (locks, reads, writes) first; then the event
log's block of positions, taken by one statement (``EventAppender.flush``: a
transaction that built on another's change must get later positions, so nothing that
takes a tree lock may follow it); then the hooks, which may write rows of their own
(an idempotency answer holding the positions) but must not touch the tree; then COMMIT.
Without hooks, COMMIT goes out right behind the block statement (one round trip for
both); the ``Coordinator``'s own COMMIT then finds nothing left to commit.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from . import paths
from .event_appender import EventAppender
from .tree import TreeTx


class UnitOfWork:
    """The parts of one namespace transaction; see the module docstring for their order."""

    def __init__(
        self,
        conn: Connection,
        namespace: str,
        max_depth: int = paths.MAX_DEPTH,
        max_content_bytes: int = paths.MAX_CONTENT_BYTES,
    ) -> None:
        self.conn = conn
        self.namespace = namespace
        # The wake-up is the caller's, after COMMIT (see coordinator/notifier.py).
        self.events = EventAppender(conn, notify=False)
        self.tree = TreeTx(conn, namespace, self.events, max_depth, max_content_bytes)
        self._hooks: list[Callable[[], None]] = []
        self._finished = False
        #: COMMIT was sent (by ``finish``): from then on a lost connection may or may not
        #: have committed, so the transaction must not be run again.
        self.commit_sent = False

    def after_events(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` inside the transaction once its events have positions (so any
        ``MutationResult.seq`` of it is known), before COMMIT."""
        if self._finished:
            raise RuntimeError("this unit of work has finished")
        self._hooks.append(hook)

    def finish(self) -> None:
        """Take the event positions, then run the hooks: the transaction's last steps."""
        self._finished = True
        if not self._hooks:
            self.commit_sent = True
            self.commit_sent = self.events.flush(commit=True)
            return
        self.events.flush()
        for hook in self._hooks:
            hook()

    @property
    def wrote_events(self) -> bool:
        return self.events.base is not None
