"""What the hot routes do with a request's parts once they are parsed and checked, used by
their FastAPI handlers (``routes.commands``, ``routes.nodes``) and by the fast path
(``fast_path``), so both answer alike: ``CommandCall`` for each row of
``operations.COMMAND_ROUTES`` (build the command, answer its result), ``STAT`` for a node's
read. A handler says which call it runs with ``serving`` (``CALL_OF``): that is how the
fast path finds the hot routes in FastAPI's table.

For the fast path, each call says which of the route's parts it takes (``body_model``,
``query_names``, ``takes_if_match``: a route with any other part is refused) and
``prepare``s the work: checks on the event loop (any exception means the fast path
declines), the rest returned as a coroutine function (``Work``) that sends a command that
is one statement, or a read, on the app's ``AsyncStatements``, and runs anything else with
the blocking coordinator in a thread (``Backend``). What scope a route needs is the route's
own scope check, declared once (``deps``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.responses import Response

from coordinator import commands
from coordinator.api import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.results import MutationResult, Node
from pathkeeper.http.deps import NodeRef, checked_path, parse_if_match
from pathkeeper.http.operations import COMMAND_ROUTES, REF, CommandRoute
from pathkeeper.http.schemas import BODY_OF, MutationOut, NodeOut, command_fields
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.http.threads import in_thread

#: The JSON media type of every answer here.
JSON = "application/json"


#: The rest of a request, for the fast path to await: its response.
Work = Callable[[], Awaitable[Response]]


@dataclass(frozen=True)
class Backend:
    """What the fast path's work runs on: ``statements`` on the event loop for what is one
    statement, when the app has them (its lifespan opens them); otherwise, and for the
    rest, the blocking ``coord`` in a thread, as FastAPI's handlers run it."""

    coord: Coordinator
    statements: AsyncStatements | None

    def execution(self, ns: str, command: commands.Command
                  ) -> Callable[[], Awaitable[MutationResult]]:
        """The running of ``command``, for later; what the statement's own checks refuse
        is raised now."""
        statements = self.statements
        statement = None if statements is None else statements.statement(ns, command)
        if statements is None or statement is None:
            coord = self.coord
            return lambda: in_thread(coord.execute, ns, command)
        return lambda: statements.execute(statement)

    async def stat(self, ns: str, target: str) -> Node:
        """The node at ``target``, a path or an id (the statement tells them apart)."""
        if self.statements is None:
            return await in_thread(self.coord.stat, ns, target)
        return await self.statements.stat(ns, target)


@dataclass(frozen=True)
class CommandCall:
    route: CommandRoute
    #: The JSON body's model (None: everything is in the URL).
    body_model: type[BaseModel] | None
    #: Full paths in the body, held to the service's own path limit as the URL's are.
    path_fields: tuple[str, ...]

    @classmethod
    def of(cls, route: CommandRoute) -> CommandCall:
        fields = command_fields(route.command, route.body)
        return cls(route, BODY_OF[route.command],
                   tuple(name for name, (hint, _) in fields.items() if hint == commands.Path))

    @property
    def query_names(self) -> tuple[str, ...]:
        """The command's fields sent as query parameters."""
        return self.route.query

    @property
    def takes_if_match(self) -> bool:
        """Whether the route reads ``If-Match`` (a compare-and-swap on the node it names)."""
        return self.route.by_node

    def command(
        self, settings: ServiceSettings, *, ref: NodeRef | None, body: BaseModel | None,
        if_match: str | None, query: dict[str, Any],
    ) -> commands.Command:
        """The command of a request; ``ServiceError`` or a coordinator error if its
        parts do not make one."""
        values = dict(query)
        if body is not None:
            values.update((name, getattr(body, name)) for name in self.route.body)
        for name in self.path_fields:
            values[name] = checked_path(values[name], settings)
        if ref is not None:
            values[REF] = ref.checked(settings)
        if "if_version" in values:
            values["if_version"] = parse_if_match(if_match, values["if_version"])
        return self.route.command(**values)

    def answer(self, result: MutationResult) -> tuple[int, dict[str, Any]]:
        """The status and JSON body of a change: 201 when a creating route made something."""
        return self._status(result), MutationOut.of(result).model_dump(mode="json")

    def response(self, result: MutationResult) -> Response:
        """``answer`` as a response: the same bytes as a ``JSONResponse`` of it, for about
        60 % of the CPU (pydantic writes the JSON without building a dict first)."""
        return Response(MutationOut.of(result).model_dump_json(), self._status(result),
                        media_type=JSON)

    def _status(self, result: MutationResult) -> int:
        return 201 if self.route.creates and result.seq is not None else 200

    def prepare(self, backend: Backend, settings: ServiceSettings, ns: str, *,
                ref: NodeRef | None, body: BaseModel | None, if_match: str | None,
                query: Mapping[str, Any]) -> Work:
        """The command run alone (no ``Idempotency-Key``), as its FastAPI handler runs it;
        ``query``: the ``query_names`` parameters the request has, validated."""
        command = self.command(settings, ref=ref, body=body, if_match=if_match,
                               query=dict(query))
        execution = backend.execution(ns, command)

        async def run() -> Response:
            return self.response(await execution())

        return run


@dataclass(frozen=True)
class StatCall:
    """A node's read, by path or by id: the node, its version as the ETag."""

    body_model: None = None
    query_names: tuple[str, ...] = ()
    takes_if_match: bool = False

    @staticmethod
    def response(coord: Coordinator, ns: str, ref: NodeRef, target: str) -> Response:
        """``target``: ``ref`` checked against the settings."""
        node: Node = coord.stat(ns, target) if ref.is_path else coord.get(ns, target)
        return StatCall.node_response(node)

    @staticmethod
    def node_response(node: Node) -> Response:
        return Response(NodeOut.of(node).model_dump_json(), media_type=JSON,
                        headers={"ETag": f'"{node.version}"'})

    def prepare(self, backend: Backend, settings: ServiceSettings, ns: str, *,
                ref: NodeRef | None, body: BaseModel | None, if_match: str | None,
                query: Mapping[str, Any]) -> Work:
        assert ref is not None  # the route takes the node of its URL
        target = ref.checked(settings)

        async def run() -> Response:
            return self.node_response(await backend.stat(ns, target))

        return run


CALLS: dict[CommandRoute, CommandCall] = {route: CommandCall.of(route) for route in COMMAND_ROUTES}
STAT = StatCall()

Call = CommandCall | StatCall
#: The call each hot route's handler runs (``serving``).
CALL_OF: dict[Callable[..., Any], Call] = {}

H = TypeVar("H", bound=Callable[..., Any])


def serving(call: Call) -> Callable[[H], H]:
    """Mark a route handler as one that runs ``call``: the fast path may serve its route."""

    def mark(handler: H) -> H:
        CALL_OF[handler] = call
        return handler

    return mark
