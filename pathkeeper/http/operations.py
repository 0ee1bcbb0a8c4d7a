"""How each command travels over HTTP: one row per command class.

The server registers its command routes from this table (``routes.nodes``) and the
client (``pathkeeper.client``) builds its requests from it, so a new command is one
new row here. A command with a ``ref`` field names its node in the URL, by path
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

from coordinator.commands import (
    Command,
    Copy,
    CreateFile,
    Delete,
    Mkdir,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)

NAMESPACE_URL = "/v1/namespaces/{ns}"
#: A node named by path (in the ``path`` query parameter) or by id.
NODE_BY_PATH = "/node"
NODE_BY_ID = "/nodes/{node_id}"
#: The field a node's URL carries.
REF = "ref"


@dataclass(frozen=True)
class CommandRoute:
    command: type[Command]
    method: str
    #: After the node's URL, or after the namespace's for a command without ``ref``.
    suffix: str
    #: The route's name (the OpenAPI summary and operation id): a node's route by id
    #: adds ``_by_id``.
    name: str
    #: The OpenAPI description.
    doc: str
    #: Fields sent as query parameters instead of in the body.
    query: tuple[str, ...] = ()
    #: 201 Created when the change made something (``seq`` not null), else 200.
    creates: bool = False

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


COMMAND_ROUTES: tuple[CommandRoute, ...] = (
    CommandRoute(Mkdir, "POST", "/dirs", "mkdir", creates=True, doc=(
        "Create a directory (``parents``: like mkdir -p; 200 with seq null if it existed).")),
    CommandRoute(CreateFile, "POST", "/files", "create_file", creates=True,
                 doc="Create a file with content and metadata."),
    CommandRoute(WriteFile, "PUT", "/content", "write_content",
                 doc="Replace a file's content (and metadata, if given)."),
    CommandRoute(SetMetadata, "PUT", "/metadata", "set_metadata",
                 doc="Replace the metadata of a file or directory."),
    CommandRoute(Move, "POST", "/move", "move_node",
                 doc="Move (and possibly rename) the node to the full path ``dst``."),
    CommandRoute(Rename, "POST", "/rename", "rename_node", doc="Rename the node in place."),
    CommandRoute(Delete, "DELETE", "", "delete_node", query=("recursive", "if_version"),
                 doc="Delete the node (a non-empty directory only with ``recursive``)."),
    CommandRoute(Copy, "POST", "/copy", "copy_node", creates=True, doc=(
        "Copy a file, or a directory with its subtree, into ``to_parent`` as ``name`` "
        "(default: its own name); the copies get new ids.")),
)
#: The row of each command class (a test checks that every one in ``COMMANDS`` has one).
ROUTE_OF: dict[type[Command], CommandRoute] = {r.command: r for r in COMMAND_ROUTES}
