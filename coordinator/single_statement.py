"""A rename, a move, a create, a delete, a write, a copy or a stat that is a whole
transaction: one statement, in autocommit.

``Coordinator.execute`` of a lone ``Rename`` (the most frequent write) does not go
through a ``UnitOfWork``: one statement calls ``pathkeeper_rename`` (the rule, in the
server), takes the transaction's block of positions and writes the ``moved`` event.
It is sent alone in autocommit, so the server runs it as a transaction of its own and
commits it as it ends: one round trip, one message each way, and no Python between
the steps. (Sent in a pipeline behind BEGIN and ahead of COMMIT and the wake-up, the
same statement cost twice the client CPU: psycopg's pipeline machinery and the
wake-up's own statement; the wake-up now goes from the ``Notifier``.) What a
``UnitOfWork`` keeps in order holds here by the statement's shape: the function (every
lock and write) runs first, as the materialized ``r``; the claim (transaction id,
position lock, ``nextval``) is evaluated per row of ``r``, so after it; the event is
written into that block. The payload is built in SQL from ``events.Moved``
(``payload_sql`` checks its keys) from the same sources as the event
``TreeTx.call_function`` appends inside a group (``function_logged_sql``: the command's
declaration, ``commands.ServerFunction``). A lone create (``create_file``, ``mkdir``
without ``parents``) is the same shape around ``pathkeeper_create``, whose insert (and
its foreign-key check) ends inside the function, so before the claim; a lone move,
delete, content write or metadata write, around ``pathkeeper_move``,
``pathkeeper_delete``, ``pathkeeper_write``, ``pathkeeper_set_metadata`` and
``pathkeeper_merge_metadata``, likewise, each derived from its command's declaration. A
lone copy (``COPY_LOGGED_SQL``) claims one block after ``pathkeeper_copy`` and writes one
event per new node into it, in the function's order. A lone stat is ``StatQuery``'s one
statement, sent the same way (it was BEGIN, the walk, the row and COMMIT: four round
trips).

Each command says which statement it is through ``Command.apply`` on a
``LoneStatements`` (``lone``), as it says which tree operation it is through the same
method on a ``TreeTx``: no list of command classes here, and no method for a command
that declares its function (``call_function`` runs any). ``Lone`` is the statement, its
parameters and what its row or refusal means; ``send`` runs it on a blocking connection,
``async_statements.AsyncStatements`` on an asyncio one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError

from .commands import Command, NodeFunctionCommand, ServerFunction
from .db import LoneConnection, driver_sql
from .event_appender import POSITION_CLAIM_SQL
from .events import Created, DomainEvent, payload_keys, payload_sql
from .results import Committed, MutationResult, Node
from .server_calls import (
    COPY_CALL,
    CREATE_CALL,
    NODE_ANSWER,
    CopyCall,
    CreateCall,
    FunctionCall,
    StatQuery,
    answer_columns,
    event_sources,
    function_binary,
    function_call,
)
from .settings import Settings


def _of_r(columns: tuple[str, ...]) -> str:
    """``columns`` of the statement's ``r``, as a select list."""
    return ", ".join(f"r.{column}" for column in columns)


def _logged(call: str, event: type[DomainEvent], payload: str, only_if: str, answer: str,
            *binary: str) -> str:
    """The statement around a function ``call`` that returns the node's row: the call
    (materialized ``r``: every lock and write first), then the claim of a block, per row
    of ``r`` for which ``only_if`` holds (so after the call), then ``event`` built by
    ``payload`` into that block; answers ``r``'s columns ``answer`` and the event's
    ``position`` (the block's base; None when no event was written)."""
    return driver_sql(
        f"""
    WITH r AS MATERIALIZED (SELECT * FROM {call}),
    block AS (
        SELECT nextval('event_position_seq') AS base
        FROM r, LATERAL (SELECT * FROM ({POSITION_CLAIM_SQL}) AS c
                         WHERE {only_if} OFFSET 0) AS claim
    ),
    written AS (
        INSERT INTO events (namespace, position, node_id, type, payload)
        SELECT :ns, block.base, r.id, '{event.TYPE}', {payload} FROM r, block
    )
    SELECT {answer}, (SELECT base FROM block) AS position FROM r
    """,
        binary=binary,
    )


_CREATED_PAYLOAD = payload_sql(Created, {
    "id": "CAST(r.id AS text)", "parent_id": "CAST(r.parent_id AS text)", "name": "r.name",
    "kind": "r.kind", "path": "CAST(:path AS text)", "content": "r.content",
    "metadata": "r.metadata", "version": "r.version",
})

CREATE_LOGGED_SQL = _logged(CREATE_CALL, Created, _CREATED_PAYLOAD, "r.id IS NOT NULL",
                            _of_r(NODE_ANSWER), "parent")

#: The node's columns a declared function answers (``ServerFunction``), as an event's
#: payload takes them.
_NODE_PAYLOAD = {
    "id": "CAST(r.id AS text)", "parent_id": "CAST(r.parent_id AS text)", "name": "r.name",
    "kind": "r.kind", "path": "r.path", "content": "r.content", "metadata": "r.metadata",
    "version": "r.version",
}

#: A lone copy: the new nodes (materialized ``r``, parents first, numbered in that order
#: by ``WITH ORDINALITY``), then one claim of a block (after the call: it reads ``r``),
#: then a ``created`` event per node in that order, each payload built in the server from
#: the node's row, so the copied contents never travel to the client and back (in a
#: group, ``TreeTx.copy`` appends the same events from the rows). Answers the top node and
#: the last event's position: ``wait_indexed`` of it waits for every copy.
COPY_LOGGED_SQL = driver_sql(
    f"""
    WITH r AS MATERIALIZED (SELECT * FROM {COPY_CALL} WITH ORDINALITY),
    block AS (
        SELECT nextval('event_position_seq') AS base
        FROM (SELECT 1 AS copied FROM r LIMIT 1) AS one,
             LATERAL (SELECT * FROM ({POSITION_CLAIM_SQL}) AS c
                      WHERE one.copied = 1 OFFSET 0) AS claim
    ),
    written AS (
        INSERT INTO events (namespace, position, node_id, type, payload)
        SELECT :ns, block.base + r.ordinality - 1, r.id, '{Created.TYPE}',
               {payload_sql(Created, _NODE_PAYLOAD)}
        FROM r, block
    )
    SELECT {_of_r((*NODE_ANSWER, "path"))},
           (SELECT base FROM block) + (SELECT count(*) FROM r) - 1 AS position
    FROM r WHERE r.ordinality = 1
    """,
    binary=("parts", "dst"),
)


def _payload_column(key: str, source: str, name: str, types: dict[str, str]) -> str:
    if source == "node":
        return _NODE_PAYLOAD[key]
    if source == "arg":
        return f"CAST(:{name} AS {types[name]})"
    return f"CAST(r.{name} AS text)" if key.endswith("id") else f"r.{name}"


@functools.cache
def function_logged_sql(fn: ServerFunction) -> str:
    """The statement of a declared function's command alone: its event's payload built
    from the same sources ``FunctionCall.result`` builds the event from
    (``server_calls.event_sources``), claimed only for a row that changed."""
    types = {a.name: a.sql_type for a in fn.args}
    sources = {key: (source, name) for key, source, name in event_sources(fn)}
    columns = {key: _payload_column(key, *sources[key], types)
               for key in payload_keys(fn.event)}
    only_if = "r.id IS NOT NULL" if fn.changed is None else f"r.{fn.changed}"
    return _logged(function_call(fn), fn.event, payload_sql(fn.event, columns), only_if,
                   _of_r(answer_columns(fn)), *function_binary(fn))


class _Logged(Protocol):
    """A call whose function answers the node's row and whether it changed it."""

    @property
    def ns(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...

    def refused(self, exc: IntegrityError) -> Exception: ...

    def result(self, row: Any) -> tuple[Node, object]: ...


@dataclass(frozen=True)
class Lone:
    """A command that is a whole transaction: its one statement, the statement's
    parameters, and what its answer (one row) or its refusal means. Sent by the
    ``Coordinator`` (``send``, on a pooled connection) and by ``AsyncStatements`` (on
    an asyncio connection) alike."""

    sql: str
    params: Mapping[str, Any]
    call: _Logged | CreateCall | CopyCall

    @property
    def ns(self) -> str:
        return self.call.ns

    def refused(self, exc: IntegrityError) -> Exception:
        """The typed error for an integrity violation the statement ran into."""
        return self.call.refused(exc)

    def outcome(self, row: Any) -> MutationResult:
        """The result of the statement's row: the node, and the event's position when
        it wrote one (a rename to the name it has already writes none)."""
        assert row is not None
        if isinstance(self.call, CreateCall):  # a create always changes
            return MutationResult(self.call.result(row), Committed(int(row.position)))
        if isinstance(self.call, CopyCall):
            return MutationResult(self.call.top(row), Committed(int(row.position)))
        node, event = self.call.result(row)
        return MutationResult(node, None if event is None else Committed(int(row.position)))


class LoneStatements:
    """The ``commands.Runner`` of commands alone on namespace ``ns`` (validated), within
    the limits of ``settings``: each command's one statement (``Lone``), or None for a
    command that is not one (a ``mkdir`` with ``parents``: several creates, Python's
    rules), which runs as a unit of work."""

    def __init__(self, ns: str, settings: Settings) -> None:
        self.ns = ns
        self.settings = settings

    def call_function(self, command: NodeFunctionCommand, /) -> Lone:
        call = FunctionCall.of(self.ns, command, self.settings)
        return Lone(function_logged_sql(command.function), call.params, call)

    def create_file(self, path: str, content: str, metadata: dict[str, Any] | None, /
                    ) -> Lone:
        return self._create(CreateCall.file(self.ns, path, content, metadata,
                                            self.settings.max_depth,
                                            self.settings.max_content_bytes))

    def mkdir(self, path: str, parents: bool, /) -> Lone | None:
        if parents:
            return None
        return self._create(CreateCall.dir(self.ns, path, self.settings.max_depth))

    @staticmethod
    def _create(call: CreateCall) -> Lone:
        return Lone(CREATE_LOGGED_SQL, {**call.params, "path": call.path}, call)

    def copy(self, ref: str, to_parent: str, name: str | None, if_version: int | None, /
             ) -> Lone:
        call = CopyCall.of(self.ns, ref, to_parent, name, if_version, self.settings.max_depth)
        return Lone(COPY_LOGGED_SQL, call.params, call)


def lone(ns: str, command: Command, settings: Settings) -> Lone | None:
    """``command`` on namespace ``ns`` (validated) as its one statement (see
    ``LoneStatements``); None for a command that is not one."""
    return command.apply(LoneStatements(ns, settings))


def send(conn: LoneConnection, statement: Lone) -> MutationResult:
    """``statement`` as a transaction of its own on ``conn``. A driver error is raised
    as ``DBAPIError`` (a refusal of the rule as the typed error, a race the rule
    detects as ``Retry`` or a retryable error): once sent, the statement may have
    committed, so the caller must not run it again after a lost connection. Waking the
    indexer is the caller's."""
    try:
        row = conn.fetch_one(statement.sql, statement.params)
    except IntegrityError as exc:
        raise statement.refused(exc) from exc
    return statement.outcome(row)


def stat(conn: LoneConnection, call: StatQuery) -> Node:
    """Run ``call`` on ``conn`` (in autocommit): one snapshot. A read: the caller may
    run it again after a lost connection."""
    return call.result(conn.fetch_one(call.sql, call.params, large=True))
