"""What a command route does with a request's parts, once they are parsed and checked:
build the command, and answer its result. One ``CommandCall`` per row of
``operations.COMMAND_ROUTES``, used by the route's FastAPI handler (``routes.commands``)
and by the command lane (``command_lane``), so both answer alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from coordinator import commands
from coordinator.tree import MutationResult
from pathkeeper.http.deps import NodeRef, checked_path, parse_if_match
from pathkeeper.http.operations import COMMAND_ROUTES, REF, CommandRoute
from pathkeeper.http.schemas import BODY_OF, MutationOut, command_fields
from pathkeeper.http.settings import ServiceSettings


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
                        media_type="application/json")

    def _status(self, result: MutationResult) -> int:
        return 201 if self.route.creates and result.seq is not None else 200


CALLS: dict[CommandRoute, CommandCall] = {route: CommandCall.of(route) for route in COMMAND_ROUTES}
