"""The changes a client can ask for, each defined once as a typed command.

A command is a frozen dataclass: its fields are what the caller says (the same names
on the wire: the HTTP request bodies and batch items are derived from these classes),
``op`` names it in a batch, ``route`` says how it travels over HTTP
(``pathkeeper.http.operations`` reads it), and ``apply`` hands it to a ``Runner``: the
tree of a transaction (``tree.TreeTx``, a step of a group) or the statement of a
command alone (``single_statement.LoneStatements``). A command whose whole rule is one
server-side function on one node (a ``NodeFunctionCommand``) declares that call
(``function``: the function, its arguments after the node, the checks Python runs on
them first, its event), and the runners derive the rest from the declaration; the
others have a method of their own on ``Runner``. The Python API (``Coordinator``),
transaction groups (``GroupTx``), ``Coordinator.apply``, the HTTP app and its client all
take these objects; the typed methods below (``NamespaceCommands``, ``GroupCommands``)
only build them.

Field constraints are ``annotated_types`` metadata: the HTTP layer's validation reads
them; the tree enforces the same limits (in bytes) whoever calls it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    get_args,
)

from annotated_types import Ge, Le, MaxLen, MinLen

from . import paths
from .content import check_content, metadata_json
from .errors import AlreadyExists, CoordinatorError, NotFound
from .events import Deleted as DeletedEvent
from .events import DomainEvent, MetadataSet, Written
from .events import Moved as MovedEvent

if TYPE_CHECKING:
    from .results import MutationResult

#: A full path, "/" first.
Path = Annotated[str, MinLen(1), MaxLen(paths.MAX_PATH_BYTES)]
#: One path segment.
Name = Annotated[str, MinLen(1), MaxLen(paths.MAX_NAME_BYTES)]
#: A node: its path if it starts with "/", else its id.
Ref = Annotated[str, MinLen(1), MaxLen(paths.MAX_PATH_BYTES)]
#: A node's version, for compare-and-swap (``if_version``).
Version = Annotated[int, Ge(1), Le(2**62)]


R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Route:
    """How a command travels over HTTP (``pathkeeper.http.operations`` makes its route,
    its request model and the client's request of it). A command with a ``ref`` field
    names its node in the URL (by path or by id); the others are posted to the
    namespace's URL."""

    method: str
    #: After the node's URL, or after the namespace's for a command without ``ref``.
    suffix: str
    #: The route's name (the OpenAPI summary and operation id): by id adds ``_by_id``.
    name: str
    #: The OpenAPI description.
    doc: str
    #: Fields sent as query parameters instead of in the body.
    query: tuple[str, ...] = ()
    #: 201 Created when the change made something (``seq`` not null), else 200.
    creates: bool = False


class Limits(Protocol):
    """The limits an argument's check reads (``Settings``, ``TreeTx``)."""

    @property
    def max_depth(self) -> int: ...

    @property
    def max_content_bytes(self) -> int: ...


@dataclass(frozen=True)
class Arg:
    """An argument of a server-side function after the node it names: the command's
    field ``field`` (None: no field, ``check`` answers from the limits alone), sent as
    ``sql_type`` under the name ``param`` (default: the field's), after ``check`` (the
    rule that is Python's: it raises the typed error, or answers what is sent)."""

    field: str | None
    sql_type: str
    check: Callable[[Any, Limits], object] | None = None  # None: sent as given
    param: str | None = None

    @property
    def name(self) -> str:
        """The parameter's name in the statement."""
        name = self.param or self.field
        assert name is not None
        return name


def content_arg(value: object, limits: Limits) -> str:
    return check_content(value, limits.max_content_bytes)


def metadata_arg(value: object, _limits: Limits) -> str:
    return metadata_json(value)


def metadata_or_none_arg(value: object, _limits: Limits) -> str | None:
    return None if value is None else metadata_json(value)


def bool_arg(value: object, _limits: Limits) -> bool:
    return bool(value)


def name_arg(value: object, _limits: Limits) -> str:
    return paths.validate_name(value)


def parent_arg(value: object, limits: Limits) -> list[str]:
    """The names of the directory a full path ends in (the path checked whole)."""
    return paths.parent_and_name(value, limits.max_depth)[0]


def last_name_arg(value: object, limits: Limits) -> str:
    """The last name of a full path (the path checked whole)."""
    return paths.parent_and_name(value, limits.max_depth)[1]


def max_depth_arg(_value: object, limits: Limits) -> int:
    return limits.max_depth


#: The compare-and-swap argument every node change takes.
IF_VERSION = Arg("if_version", "bigint")


@dataclass(frozen=True)
class ServerFunction:
    """A command's whole rule as one server-side function on one node: called as
    ``name(ns, ref, parts, id, *args)`` (the node by path or by id, as
    ``pathkeeper_lock`` takes it), it answers the node's row after the change (the
    ``nodes`` columns and ``path``, plus any column an event field needs), and the
    change is logged as one ``event``, unless the row's boolean column ``changed`` (if
    named) says nothing changed. Each event field is the node's attribute of that name,
    else the argument's, else the row's column (the one ``columns`` names for it, else
    its own); a field ending in ``id`` is sent as text.

    A refusal: with ``retry_on_foreign_key``, a foreign key's (a create below committed
    meanwhile) runs the command again; with ``taken``, a constraint's (one committed
    after the function's own check, so the database's message names no path) is the
    typed error ``taken`` words from the arguments and the node's path names (None: by
    id); any other is the function's own."""

    name: str
    args: tuple[Arg, ...]
    event: type[DomainEvent]
    retry_on_foreign_key: bool = False
    changed: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    taken: Callable[[dict[str, Any], list[str] | None],
                    Mapping[type[CoordinatorError], str]] | None = None


class NodeFunctionCommand:
    """A command that is one ``ServerFunction`` call on the node ``ref`` names: every
    runner derives it from ``function``."""

    function: ClassVar[ServerFunction]
    ref: str

    def apply(self, runner: Runner[R]) -> R:
        return runner.call_function(self)


class Runner(Protocol[R_co]):
    """What a command is run on: ``tree.TreeTx`` runs it as a step of a transaction (a
    ``MutationResult``); ``single_statement.LoneStatements`` gives its one statement as
    a transaction of its own (None for a command that is not one). A
    ``NodeFunctionCommand`` needs nothing here (``call_function`` runs any); a command
    with rules of Python's between statements is a method here, and ``TreeTx`` must
    say how it runs it."""

    def call_function(self, command: NodeFunctionCommand, /) -> R_co: ...

    def mkdir(self, path: str, parents: bool, /) -> R_co: ...

    def create_file(self, path: str, content: str, metadata: dict[str, Any] | None, /
                    ) -> R_co: ...

    def copy(self, ref: str, to_parent: str, name: str | None, if_version: int | None, /
             ) -> R_co: ...


@dataclass(frozen=True)
class Mkdir:
    """Create a directory; with ``parents``, missing parents too, and an existing
    directory is no change (``seq`` None), like ``mkdir -p``."""

    path: Path
    parents: bool = False
    op: Literal["mkdir"] = field(default="mkdir", kw_only=True)
    route: ClassVar[Route] = Route("POST", "/dirs", "mkdir", creates=True, doc=(
        "Create a directory (``parents``: like mkdir -p; 200 with seq null if it existed)."))

    def apply(self, runner: Runner[R]) -> R:
        return runner.mkdir(self.path, self.parents)


@dataclass(frozen=True)
class CreateFile:
    """Create a file with content and metadata; its parent directory must exist."""

    path: Path
    content: str = ""
    metadata: dict[str, Any] | None = None
    op: Literal["create_file"] = field(default="create_file", kw_only=True)
    route: ClassVar[Route] = Route("POST", "/files", "create_file", creates=True,
                                   doc="Create a file with content and metadata.")

    def apply(self, runner: Runner[R]) -> R:
        return runner.create_file(self.path, self.content, self.metadata)


@dataclass(frozen=True)
class WriteFile(NodeFunctionCommand):
    """Replace a file's content, and its metadata when given."""

    ref: Ref
    content: str
    metadata: dict[str, Any] | None = None
    if_version: Version | None = None
    op: Literal["write_file"] = field(default="write_file", kw_only=True)
    route: ClassVar[Route] = Route("PUT", "/content", "write_content",
                                   doc="Replace a file's content (and metadata, if given).")
    function: ClassVar[ServerFunction] = ServerFunction("pathkeeper_write", (
        Arg("content", "text", content_arg), Arg("metadata", "jsonb", metadata_or_none_arg),
        IF_VERSION), Written)


@dataclass(frozen=True)
class SetMetadata(NodeFunctionCommand):
    """Replace the metadata of a file or directory."""

    ref: Ref
    metadata: dict[str, Any]
    if_version: Version | None = None
    op: Literal["set_metadata"] = field(default="set_metadata", kw_only=True)
    route: ClassVar[Route] = Route("PUT", "/metadata", "set_metadata",
                                   doc="Replace the metadata of a file or directory.")
    function: ClassVar[ServerFunction] = ServerFunction(
        "pathkeeper_set_metadata", (Arg("metadata", "jsonb", metadata_arg), IF_VERSION),
        MetadataSet)


@dataclass(frozen=True)
class MergeMetadata(NodeFunctionCommand):
    """Update the metadata of a file or directory key by key: each key of ``metadata``
    replaces the node's, a key set to None (JSON null) is removed, the other keys stay
    (top level only: a nested object is replaced whole). One statement: concurrent
    merges of different keys all survive, where a read and a ``set_metadata`` would
    need a compare-and-swap and a retry."""

    ref: Ref
    metadata: dict[str, Any]
    if_version: Version | None = None
    op: Literal["merge_metadata"] = field(default="merge_metadata", kw_only=True)
    route: ClassVar[Route] = Route("PATCH", "/metadata", "merge_metadata", doc=(
        "Update the metadata key by key: each key given replaces the node's, a key set "
        "to null is removed, the others stay."))
    function: ClassVar[ServerFunction] = ServerFunction(
        "pathkeeper_merge_metadata", (Arg("metadata", "jsonb", metadata_arg), IF_VERSION),
        MetadataSet)


@dataclass(frozen=True)
class Move(NodeFunctionCommand):
    """Move (and possibly rename) a node to the full path ``dst``."""

    ref: Ref
    dst: Path
    if_version: Version | None = None
    op: Literal["move"] = field(default="move", kw_only=True)
    route: ClassVar[Route] = Route(
        "POST", "/move", "move_node",
        doc="Move (and possibly rename) the node to the full path ``dst``.")

    # The function answers where the node was (old_parent_id, old_name, old_path) and
    # whether it moved (a move to where it is is no change: no event).
    function: ClassVar[ServerFunction] = ServerFunction(
        "pathkeeper_move", (
            Arg("dst", "text[]", parent_arg), Arg("dst", "text", last_name_arg, "name"),
            IF_VERSION, Arg(None, "integer", max_depth_arg, "max_depth")),
        MovedEvent, changed="changed", taken=lambda args, _parts: {
            AlreadyExists: f"{paths.join_path([*args['dst'], args['name']])} already exists",
            NotFound: "the destination directory was deleted",
        })


@dataclass(frozen=True)
class Rename(NodeFunctionCommand):
    """Rename a node in place."""

    ref: Ref
    name: Name
    if_version: Version | None = None
    op: Literal["rename"] = field(default="rename", kw_only=True)
    route: ClassVar[Route] = Route("POST", "/rename", "rename_node",
                                   doc="Rename the node in place.")

    # A rename stays in its directory (old_parent_id is parent_id); a rename to the
    # name it has is no change: no event.
    function: ClassVar[ServerFunction] = ServerFunction(
        "pathkeeper_rename", (Arg("name", "text", name_arg), IF_VERSION), MovedEvent,
        changed="changed", columns=(("old_parent_id", "parent_id"),),
        taken=lambda args, parts: {AlreadyExists: "{} already exists".format(
            args["name"] if parts is None else paths.join_path([*parts[:-1], args["name"]]))})


@dataclass(frozen=True)
class Delete(NodeFunctionCommand):
    """Delete a node; a non-empty directory only with ``recursive``."""

    ref: Ref
    recursive: bool = False
    if_version: Version | None = None
    op: Literal["delete"] = field(default="delete", kw_only=True)
    route: ClassVar[Route] = Route(
        "DELETE", "", "delete_node", query=("recursive", "if_version"),
        doc="Delete the node (a non-empty directory only with ``recursive``).")
    # The function answers the row as it was, and ``count`` (nodes deleted).
    function: ClassVar[ServerFunction] = ServerFunction(
        "pathkeeper_delete", (Arg("recursive", "boolean", bool_arg), IF_VERSION),
        DeletedEvent, retry_on_foreign_key=True)


@dataclass(frozen=True)
class Copy:
    """Copy a file, or a directory with its whole subtree, into the directory
    ``to_parent`` as ``name`` (None: the node's own name); the copies get new ids."""

    ref: Ref
    to_parent: Path
    name: Name | None = None
    if_version: Version | None = None
    op: Literal["copy"] = field(default="copy", kw_only=True)
    route: ClassVar[Route] = Route("POST", "/copy", "copy_node", creates=True, doc=(
        "Copy a file, or a directory with its subtree, into ``to_parent`` as ``name`` "
        "(default: its own name); the copies get new ids."))

    def apply(self, runner: Runner[R]) -> R:
        return runner.copy(self.ref, self.to_parent, self.name, self.if_version)


Command = (
    Mkdir | CreateFile | WriteFile | SetMetadata | MergeMetadata | Move | Rename | Delete | Copy
)
#: Every command class, in the order the documentation lists them (``Command``'s, so a
#: new command is added once, there).
COMMANDS: tuple[type[Command], ...] = get_args(Command)


class NamespaceCommands(ABC):
    """Typed methods for each command, namespace first: ``Coordinator`` and the HTTP
    client implement ``execute``."""

    @abstractmethod
    def execute(self, namespace: str, command: Command) -> MutationResult:
        """Run one command in a transaction of its own."""

    def mkdir(self, ns: str, path: str, parents: bool = False) -> MutationResult:
        return self.execute(ns, Mkdir(path, parents))

    def create_file(
        self, ns: str, path: str, content: str = "", metadata: dict[str, Any] | None = None
    ) -> MutationResult:
        return self.execute(ns, CreateFile(path, content, metadata))

    def write_file(
        self, ns: str, ref: str, content: str, metadata: dict[str, Any] | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        return self.execute(ns, WriteFile(ref, content, metadata, if_version))

    def set_metadata(
        self, ns: str, ref: str, metadata: dict[str, Any], if_version: int | None = None
    ) -> MutationResult:
        return self.execute(ns, SetMetadata(ref, metadata, if_version))

    def merge_metadata(
        self, ns: str, ref: str, metadata: dict[str, Any], if_version: int | None = None
    ) -> MutationResult:
        return self.execute(ns, MergeMetadata(ref, metadata, if_version))

    def move(
        self, ns: str, src: str, dst_path: str, if_version: int | None = None
    ) -> MutationResult:
        return self.execute(ns, Move(src, dst_path, if_version))

    def rename(
        self, ns: str, ref: str, new_name: str, if_version: int | None = None
    ) -> MutationResult:
        return self.execute(ns, Rename(ref, new_name, if_version))

    def delete(
        self, ns: str, ref: str, recursive: bool = False, if_version: int | None = None
    ) -> MutationResult:
        return self.execute(ns, Delete(ref, recursive, if_version))

    def copy(
        self, ns: str, ref: str, to_parent: str, name: str | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        return self.execute(ns, Copy(ref, to_parent, name, if_version))


#: What a group's step answers: its result in-process (``MutationResult``), a placeholder
#: filled at commit over HTTP (``pathkeeper.client.Pending``).
StepResult = TypeVar("StepResult")


class GroupCommands(ABC, Generic[StepResult]):
    """The same typed methods inside a group, whose namespace is already chosen."""

    @abstractmethod
    def execute(self, command: Command) -> StepResult:
        """Run one command as the group's next step."""

    def mkdir(self, path: str, parents: bool = False) -> StepResult:
        return self.execute(Mkdir(path, parents))

    def create_file(
        self, path: str, content: str = "", metadata: dict[str, Any] | None = None
    ) -> StepResult:
        return self.execute(CreateFile(path, content, metadata))

    def write_file(
        self, ref: str, content: str, metadata: dict[str, Any] | None = None,
        if_version: int | None = None,
    ) -> StepResult:
        return self.execute(WriteFile(ref, content, metadata, if_version))

    def set_metadata(
        self, ref: str, metadata: dict[str, Any], if_version: int | None = None
    ) -> StepResult:
        return self.execute(SetMetadata(ref, metadata, if_version))

    def merge_metadata(
        self, ref: str, metadata: dict[str, Any], if_version: int | None = None
    ) -> StepResult:
        return self.execute(MergeMetadata(ref, metadata, if_version))

    def move(self, src: str, dst_path: str, if_version: int | None = None) -> StepResult:
        return self.execute(Move(src, dst_path, if_version))

    def rename(self, ref: str, new_name: str, if_version: int | None = None) -> StepResult:
        return self.execute(Rename(ref, new_name, if_version))

    def delete(
        self, ref: str, recursive: bool = False, if_version: int | None = None
    ) -> StepResult:
        return self.execute(Delete(ref, recursive, if_version))

    def copy(
        self, ref: str, to_parent: str, name: str | None = None, if_version: int | None = None
    ) -> StepResult:
        return self.execute(Copy(ref, to_parent, name, if_version))
