"""How each command travels over HTTP: one row per command class, read from the
class's own ``route`` (``coordinator.commands.Route``).

The server registers its command routes from this table (``routes.nodes``) and the
client (``pathkeeper.client``) builds its requests from it, so a new command needs
nothing here. A command with a ``ref`` field names its node in the URL, by path
(``/v1/namespaces/{ns}/node<suffix>?path=/a/b``) or by id
(``/v1/namespaces/{ns}/nodes/{node_id}<suffix>``); the others are posted to
``/v1/namespaces/{ns}<suffix>``. Of the remaining fields, those in ``query`` go in the
query string and the rest make the JSON body; ``op`` is implied by the route.

Imports neither FastAPI nor pydantic: the client needs only the table.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from coordinator.commands import COMMANDS, Command

NAMESPACE_URL = "/v1/namespaces/{ns}"
#: A node named by path (in the ``path`` query parameter) or by id.
NODE_BY_PATH = "/node"
NODE_BY_ID = "/nodes/{node_id}"
#: The field a node's URL carries.
REF = "ref"


@dataclass(frozen=True)
class CommandRoute:
    """A command class with its ``route`` (``coordinator.commands.Route``'s fields)."""

    command: type[Command]
    method: str
    suffix: str
    name: str
    doc: str
    query: tuple[str, ...] = ()
    creates: bool = False

    @classmethod
    def of(cls, command: type[Command]) -> CommandRoute:
        r = command.route
        return cls(command, r.method, r.suffix, r.name, r.doc, r.query, r.creates)

    @functools.cached_property
    def by_node(self) -> bool:
        """Whether the URL names the node (the command has a ``ref``)."""
        return REF in self.fields

    @functools.cached_property
    def fields(self) -> tuple[str, ...]:
        """The command's fields as the caller gives them (``op`` left out)."""
        return tuple(f.name for f in dataclasses.fields(self.command) if f.name != "op")

    @functools.cached_property
    def body(self) -> tuple[str, ...]:
        """The fields of the JSON body: neither in the URL nor in the query."""
        return tuple(f for f in self.fields if f != REF and f not in self.query)


#: In the order of ``commands.COMMANDS`` (the documentation's).
COMMAND_ROUTES: tuple[CommandRoute, ...] = tuple(CommandRoute.of(c) for c in COMMANDS)
#: The row of each command class.
ROUTE_OF: dict[type[Command], CommandRoute] = {r.command: r for r in COMMAND_ROUTES}
