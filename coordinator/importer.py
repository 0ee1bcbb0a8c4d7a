"""Bulk import of an existing tree: JSON Lines in, one transaction, COPY-class speed.

Each line is one node, ``{"path": "/a/b", "kind": "dir" | "file", "content": ...,
"metadata": {...}}``, lines in any order. Missing parent directories are created; a
path that already exists in the namespace, or twice in the input, is an error naming
its line. All or nothing: any bad line and nothing is written.

How, and why this way:

1. **Validate in Python, streaming.** Each line is parsed and checked (JSON, fields,
   names with the same rules as ``paths``) and written at once into a temporary table
   with ``COPY``; nothing of the input stays in Python's memory but the line being
   read, and a line longer than ``max_import_line_bytes`` is refused as soon as that
   much of it has arrived, so memory is bounded whatever the input. A bad line is
   noted and skipped; the good ones are still staged, and every bad line is reported
   (the first ``MAX_REPORTED`` in full), with its number (an overlong line from a stream
   or a binary file ends the reading: the rest of it is never read).
2. **Resolve set-based in SQL.** Missing parents, duplicates, a file under a file and
   paths that already exist are found by joins over the staged rows, not row by row.
   The good lines are staged even after a bad one, so one refusal lists the problems of
   every kind at once (a fixed file does not meet the next kind on the next try).
   Existing nodes are found by walking the staged paths from the root (a recursive
   join that only descends where the namespace already has a directory of that name);
   an import into an empty namespace, where nothing can exist yet, skips the walk.
3. **Insert set-based, in bounded slices**: the new nodes, each with its id, its
   parent's and its rank (parents before children: by depth, then line), are computed
   once into a temporary table; ``INSERT ... SELECT`` from it into ``nodes`` takes them
   in slices of at most ``slice_rows`` ranks, one statement each (the foreign key to the
   parent takes ``FOR KEY SHARE`` on existing parents, as a create does, so the lock
   rules of ``tree.py`` hold unchanged), then, as the last statements, the events from
   the same rows, sliced the same way. Slices, not one statement: PostgreSQL queues
   every inserted row's foreign-key checks until its statement ends, tens of bytes a
   row in the backend (267 MB for one insert of 10,000,000 nodes), so the server's
   memory too is bounded whatever the input. A slice's parents are in it or in an
   earlier one (they rank first), so each statement's checks pass on their own; all
   slices are in the import's one transaction, so it stays all or nothing.
4. **Events**: one ``created`` event per new node, parents before children (path
   order), with the same payload a ``mkdir``/``create_file`` writes, so the fold of
   the log (replay, verify) rebuilds exactly these rows. A transaction normally takes
   one block of ``POSITION_BLOCK`` positions; an import with more events takes a run
   of consecutive blocks in its claiming statement (transaction id, then the position
   lock, then ``nextval`` for each block: the protocol of ``coordinator/event_appender.py``
   unchanged, only more than one ``nextval``). Its events are still one contiguous
   range that becomes visible at one commit; a reader with a ``limit`` may hand it
   out in several batches of whole blocks, which keeps an indexer's batch bounded.
   Before its claim the import marks its transaction with its namespace
   (``event_appender.IMPORT_MARK_SQL``): readers of other namespaces and partitions do not
   wait for its events insert and commit. That mark promises that the transaction
   writes events of this namespace only: ``Coordinator.import_nodes`` runs an import
   in a transaction of its own; a caller that runs one in its own transaction must
   append no other namespace's events to it.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from . import paths, sql
from .content import check_content, metadata_json, metadata_too_deep
from .db import FOREIGN_KEY_VIOLATION, UNIQUE_VIOLATION, Driver, sqlstate
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    InvalidImport,
    NotADirectory,
    NotFound,
    TooLarge,
    Unavailable,
)
from .event_appender import IMPORT_MARK_SQL, position_claim_sql
from .events import Created, payload_sql
from .results import POSITION_BLOCK
from .settings import MAX_IMPORT_LINE_BYTES

log = logging.getLogger("pathkeeper.importer")

#: Bad lines reported in full (the rest are counted): enough to fix a file in one go,
#: few enough that a file of garbage does not produce a garbage-sized answer.
MAX_REPORTED = 20
#: How often (lines) the progress callback is called while reading.
PROGRESS_EVERY = 2000

FIELDS = frozenset({"path", "kind", "content", "metadata"})


@dataclass(frozen=True)
class ImportResult:
    """``created``: nodes inserted (lines plus the missing parents made for them);
    ``first_seq``/``last_seq``: positions of the first and last event (None when
    nothing was created). ``wait_indexed(result.seq)`` waits for all of them."""

    namespace: str
    lines: int
    created: int
    implied_dirs: int
    first_seq: int | None
    last_seq: int | None
    seconds: float

    @property
    def seq(self) -> int | None:
        return self.last_seq


@dataclass(frozen=True)
class ImportProgress:
    """What a progress callback sees: the phase, lines and bytes read so far."""

    phase: str  # "read", "resolve", "insert", "events", "done"
    lines: int
    bytes: int


ProgressFn = Callable[[ImportProgress], None]


# The decoder's scanner (the C one): an attribute its __init__ sets, not in the stubs.
_scan_json: Callable[[str, int], tuple[Any, int]] = vars(json.JSONDecoder())["scan_once"]


def loads_line(raw: bytes | str) -> Any:
    """``json.loads(raw)``, faster for the usual line. A line that starts with ``{`` is
    UTF-8 to ``json.loads`` too (its encoding detection looks at byte order marks and NUL
    bytes only), so it is decoded as such and handed to the decoder's scanner directly,
    skipping that detection and two passes for whitespace: half of ``json.loads``' time
    a line. Anything else, or anything that fails, goes through ``json.loads`` itself, so
    every result and every error is its own."""
    try:
        text_ = raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw
        if text_[:1] == "{":
            obj, end = _scan_json(text_, 0)
            if end == len(text_) or not text_[end:].strip(" \t\n\r"):
                return obj
    except (ValueError, StopIteration, RecursionError):
        pass
    return json.loads(raw)


def parse_line(
    raw: bytes | str, max_depth: int, max_content_bytes: int = paths.MAX_CONTENT_BYTES
) -> tuple[str, str, str, str, str | None, str, int]:
    """One input line as (path, parent_path, name, kind, content, metadata JSON, depth);
    raises a ``CoordinatorError`` saying what is wrong with it."""
    try:
        obj = loads_line(raw)
    except UnicodeDecodeError:
        raise InvalidImport("not valid UTF-8") from None
    except ValueError as exc:
        raise InvalidImport(f"not valid JSON ({exc})") from None
    except RecursionError:
        # Nested past what the parser can take, so past the metadata's limit too (and
        # no other field nests at all).
        raise metadata_too_deep("JSON") from None
    if not isinstance(obj, dict):
        raise InvalidImport("not a JSON object")
    if not obj.keys() <= FIELDS:
        unknown = obj.keys() - FIELDS
        raise InvalidImport(f"unknown field(s) {', '.join(sorted(map(repr, unknown)))}")
    if "path" not in obj:
        raise InvalidImport("no 'path'")
    path, parts = paths.checked_path(obj["path"], max_depth)
    if not parts:
        raise InvalidImport("the root cannot be imported (it exists with the namespace)")
    kind = obj.get("kind")
    if kind == "file":
        raw_content = obj.get("content", "")
        content: str | None = check_content(
            "" if raw_content is None else raw_content, max_content_bytes
        )
    elif kind == "dir":
        if obj.get("content") is not None:
            raise InvalidImport("a directory has no content")
        content = None
    else:
        raise InvalidImport(f"'kind' must be \"dir\" or \"file\", not {kind!r}")
    md = obj.get("metadata")
    metadata = "{}" if md is None or md == {} else metadata_json(md)
    name = parts[-1]
    parent = path[: len(path) - len(name) - 1] or "/"
    return path, parent, name, kind, content, metadata, len(parts)


class _Problems:
    """Bad lines of every check: the first ``MAX_REPORTED`` kept, all counted; the error
    class of the first one is the class raised (a typed error for the caller to branch
    on). The lines are listed in line order whichever check found them."""

    def __init__(self) -> None:
        self.kept: list[tuple[int, str]] = []
        self.count = 0
        self.kind: type[CoordinatorError] | None = None

    def add(self, line: int, message: str, kind: type[CoordinatorError]) -> None:
        self.count += 1
        if self.kind is None:
            self.kind = kind
        if len(self.kept) < MAX_REPORTED:
            self.kept.append((line, message))

    def count_more(self, rows: Sequence[Any]) -> None:
        """Count the problems a check found past the ``rows`` it named (their ``total``
        column counts them all)."""
        if rows:
            self.count += int(rows[0].total) - len(rows)

    def raise_if_any(self) -> None:
        if self.kind is None:
            return
        kept = sorted(self.kept)
        listed = "; ".join(f"line {n}: {m}" for n, m in kept)
        more = f" (and {self.count - len(kept)} more)" if self.count > len(kept) else ""
        noun = "bad line" if self.count == 1 else "bad lines"
        err = self.kind(f"import refused, nothing written: {self.count} {noun}: {listed}{more}")
        err.lines = tuple(kept)
        err.lines_total = self.count
        raise err


def import_timed_out(timeout: float | None) -> Unavailable:
    """An import cancelled by its timeout (``None``: by the session's statement timeout)."""
    if timeout is None:
        return Unavailable(
            "the import outlasted the session's statement timeout; nothing was written")
    return Unavailable(
        f"the import did not finish within {timeout:g} s (its timeout); nothing was written")


class LineTooLong(TooLarge):
    """Line ``line`` of an import is longer than ``limit`` bytes: raised by ``iter_lines``
    as soon as the line passes the limit, so no more of it is read."""

    def __init__(self, line: int, limit: int) -> None:
        self.line = line
        self.reason = line_too_long(limit)
        super().__init__(f"line {line}: {self.reason}")


def line_too_long(limit: int) -> str:
    return f"longer than {limit:,} bytes (the import's line limit)"


def iter_lines(
    chunks: Iterable[bytes], max_line_bytes: int = MAX_IMPORT_LINE_BYTES
) -> Iterator[bytes]:
    """Lines (without the end of line) of a stream of byte chunks, for a streamed body.

    A line cut over several chunks is kept as its pieces and joined once, when its end
    arrives: joining on every chunk instead copied the line so far each time, quadratic
    in its length (a 32 MB line cost 7 s of CPU). A line longer than ``max_line_bytes``
    raises ``LineTooLong`` once that much of it has arrived, so at most the limit and
    one chunk are held."""
    pending: list[bytes] = []  # the pieces of the line being assembled
    size = 0  # their total length
    number = 0  # lines yielded
    for chunk in chunks:
        if not chunk:
            continue
        pieces = chunk.split(b"\n")
        for piece in pieces[:-1]:  # each of these ends a line
            number += 1
            if size + len(piece) > max_line_bytes:
                raise LineTooLong(number, max_line_bytes)
            if pending:
                pending.append(piece)
                piece = b"".join(pending)
                pending, size = [], 0
            yield piece
        last = pieces[-1]
        if last:
            size += len(last)
            if size > max_line_bytes:
                raise LineTooLong(number + 1, max_line_bytes)
            pending.append(last)
    if pending:
        yield b"".join(pending)


#: Bytes read at a time from a binary file (``Importer.run``).
READ_CHUNK = 1 << 16


def lines_of(source: Iterable[bytes | str], max_line_bytes: int) -> Iterable[bytes | str]:
    """The lines of an import's source: a binary file is read in chunks through
    ``iter_lines`` (iterating it would read each line whole, however long); any other
    iterable already gives lines."""
    if isinstance(source, (io.RawIOBase, io.BufferedIOBase)):
        read = source.read
        return iter_lines(iter(lambda: read(READ_CHUNK) or b"", b""), max_line_bytes)
    return source


def line_bytes(raw: bytes | str) -> int:
    """The length of a line in bytes (a ``str`` in UTF-8; encoded only when its length
    in characters leaves the question open)."""
    if isinstance(raw, bytes):
        return len(raw)
    return len(raw.encode("utf-8", "surrogatepass")) if not raw.isascii() else len(raw)


STAGE_SQL = sql.load("q_import_stage")

# A staged content is stored in nodes as the stage compressed it (PostgreSQL does not
# compress a value again), so the stage compresses as nodes.content does: with lz4 where
# the column is set to it (migration 0020), else with the server's default.
STAGE_COMPRESSION_SQL = (
    "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_attribute "
    "WHERE attrelid = CAST('nodes' AS regclass) AND attname = 'content' "
    "AND attcompression = 'l'"
)

COPY_SQL = (
    "COPY pk_import_stage (line, path, parent_path, name, kind, content, metadata, depth) "
    "FROM STDIN"
)

IMPLIED_SQL = sql.load("q_import_implied")

DUPLICATES_SQL = sql.load("q_import_duplicates")

DROP_DUPLICATES_SQL = sql.load("q_import_drop_duplicates")

FILE_UNDER_FILE_SQL = sql.load("q_import_file_under_file")

EXISTING_SQL = sql.load("q_import_existing")

CLASHES_SQL = sql.load("q_import_clashes")

HAS_CHILDREN_SQL = (
    "SELECT EXISTS (SELECT FROM nodes WHERE namespace = :ns AND parent_id = :root)")

# Node ids: the UUIDv7 layout (RFC 9562: milliseconds, version, variant, random bits)
# with the last 48 bits a counter from a random start, numbered by input line (missing
# parents after the last line). Rows go into ``nodes`` in that order within each depth
# (slices go depth by depth), so the indexes on ids grow at a few edges instead of
# splitting pages all over: a third of the insert's time with random ids (measured).
# Ids stay unique across imports and with the random (v4) ids of single creates: 26
# random bits after the timestamp and the random counter start make two imports of the
# same millisecond overlap with a probability around 2**-50, and the primary key would
# refuse that rather than merge.
_ID = (
    "CAST(:id_prefix || lpad(to_hex(CAST(:id_start AS bigint) + coalesce({t}.seq, {t}.line)),"
    " 12, '0') AS uuid)"
)

# The new nodes with their parent's id: an existing node's, a staged one's, or the root's.
NEW_ROWS = """
    FROM pk_import_stage s
    LEFT JOIN pk_import_existing pe ON pe.path = s.parent_path
    LEFT JOIN pk_import_stage ps ON ps.path = s.parent_path
    WHERE NOT EXISTS (SELECT FROM pk_import_existing e WHERE e.path = s.path)
"""
_PARENT = f"coalesce(pe.id, CASE WHEN ps.path IS NOT NULL THEN {_ID.format(t='ps')} END, " \
    "CAST(:root AS uuid))"

# Computed once for both inserts (nodes, then events): building the ids and joining
# for the parents again for the events took longer than writing these rows. ``rank``
# orders parents before children (by depth), the order of the slices and of the events'
# positions; the table is written in that order, so a slice is a short index range.
NEW_NODES_SQL = f"""
    CREATE TEMP TABLE pk_import_new ON COMMIT DROP AS
    SELECT {_ID.format(t='s')} AS id, {_PARENT} AS parent, s.name, s.kind, s.content,
           s.metadata, s.path, s.implied,
           row_number() OVER (ORDER BY s.depth, s.line, s.seq) AS rank
    {NEW_ROWS}
"""

#: Rows inserted into ``nodes`` (and ``events``) by one statement of an import: bounds
#: the backend's queue of foreign-key checks (a few MB) whatever the import's size.
SLICE_ROWS = 50_000

# How a slice is found when there are several: the table is written in rank order, so a
# slice is a run of pages, which a BRIN index finds without sorting the ranks (a btree's
# build sorts them, in up to maintenance_work_mem: 64 MB more in the backend at 2,000,000
# nodes, measured). The planner picks it once it knows that rank follows the pages: a
# sample of 300 rows is enough for that (statistics target 1), and keeps ANALYZE's copy
# of sampled rows small. The index is exact after its recheck in any order of the pages.
RANK_INDEX_SQL = "CREATE INDEX ON pk_import_new USING brin (rank)"
RANK_STATISTICS_SQL = "ALTER TABLE pk_import_new ALTER rank SET STATISTICS 1"

INSERT_NODES_SQL = sql.load("q_import_insert_nodes")

# The foreign-key checks of the inserted rows (one query per row, run by PostgreSQL at
# each slice's end) are planned for their parameters in a session's first five runs.
# The statistics know nothing yet of the namespace's new rows, so such a plan takes the
# namespace for a row or two and reads all of it by (namespace, parent_id, name) instead
# of probing (namespace, id, kind): 30 ms a check at 50,000 new rows. The generic plan
# probes; it is forced while the slices run and the session's mode is restored after.
PLAN_MODE_SQL = "SELECT set_config('plan_cache_mode', :mode, true)"

# The payload of a 'created' event, in SQL: the keys are checked against
# events.Created when this module loads, so a schema change cannot miss the importer.
CREATED_PAYLOAD_SQL = payload_sql(Created, {
    "id": "CAST(x.id AS text)", "parent_id": "CAST(x.parent AS text)", "name": "x.name",
    "kind": "x.kind", "path": "x.path", "content": "x.content", "metadata": "x.metadata",
    "version": "1",  # the node's version: new nodes start at 1
})

# Positions by rank: a parent's 'created' event comes before its children's, the
# order the fold needs. One slice of ranks per statement, as for the nodes.
INSERT_EVENTS_SQL = f"""
    INSERT INTO events (namespace, position, node_id, type, payload)
    SELECT :ns, :base + x.rank - 1, x.id, '{Created.TYPE}', {CREATED_PAYLOAD_SQL}
    FROM pk_import_new x
    WHERE x.rank BETWEEN :first AND :last
"""


# Run ANALYZE nodes now if the import added what autovacuum's next round would analyze
# for (its threshold plus scale factor times the rows the statistics knew), not up to a
# minute later: until then the planner takes the namespace for the few rows it had, and a
# move's walks, its lock of the ancestors and its foreign-key check read the whole
# namespace at each probe (a directory move right after an import of 20,000 nodes: 46 ms,
# 1.7 ms analyzed). A role that does not own the table is warned and skipped by the server:
# the import is done either way.
ANALYZE_IF_GROWN_SQL = """
    SELECT CAST(:created AS float8) > current_setting('autovacuum_analyze_threshold')::float8
           + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
      FROM pg_class c WHERE c.oid = CAST('nodes' AS regclass)
"""


def analyze_if_grown(conn: Connection, created: int) -> bool:
    """After an import's commit, on ``conn`` (autocommit): ``ANALYZE nodes`` if the
    import's ``created`` rows are what autovacuum would analyze for; whether it was sent.

    The import has committed, so nothing here may fail it: a table another ANALYZE or a
    vacuum holds is skipped (SKIP_LOCKED: that one is at work on it), and an ANALYZE that
    fails (cancelled, past the session's statement timeout) is logged and left to
    autovacuum."""
    try:
        if not conn.execute(text(ANALYZE_IF_GROWN_SQL), {"created": created}).scalar_one():
            return False
        conn.execute(text("ANALYZE (SKIP_LOCKED) nodes"))
    except DBAPIError as exc:
        log.warning("ANALYZE nodes after an import of %d nodes failed, left to autovacuum: %s",
                    created, str(exc.orig or exc).splitlines()[0])
        return False
    return True


def id_prefix() -> tuple[str, int]:
    """The first 20 hex digits of this import's ids and the counter's start."""
    ms = int(time.time() * 1000) & (2**48 - 1)
    rand = secrets.randbits(26)
    rand_a, var, rand_b = rand >> 14, 0x8 | ((rand >> 12) & 0x3), rand & 0xFFF
    prefix = f"{ms:012x}7{rand_a:03x}{var:x}{rand_b:03x}"
    # Room for 2**40 nodes after the start: the counter never wraps into the prefix.
    return prefix, secrets.randbelow(2**48 - 2**40)


# The claiming statement: the claim of ``event_appender.position_claim_sql`` (the shard
# fence for the namespace, transaction id, then the position lock), then one nextval per
# block; MATERIALIZED runs the claim once, before any nextval. The fence is taken here, at
# the end, and not when the import starts: a freeze then never waits for an import that
# is still reading its input (it is refused at its claim instead, writing nothing).
CLAIM_BLOCKS_SQL = f"""
    WITH claim AS MATERIALIZED ({position_claim_sql("ARRAY[CAST(:ns AS text)]")}
    )
    SELECT nextval('event_position_seq') AS base
    FROM claim, generate_series(1, :k) AS g
"""


def contiguous_run(values: list[int], k: int) -> int | None:
    """The first of ``k`` consecutive blocks among ``values``, if there is such a run."""
    ordered = sorted(values)
    start = 0
    for j in range(1, len(ordered) + 1):
        if j - start >= k:
            return ordered[start]
        if j < len(ordered) and ordered[j] != ordered[j - 1] + POSITION_BLOCK:
            start = j
    return ordered[start] if len(ordered) - start >= k else None


class Importer:
    """One import on one connection, inside the caller's transaction."""

    def __init__(
        self,
        conn: Connection,
        namespace: str,
        *,
        max_depth: int = paths.MAX_DEPTH,
        max_line_bytes: int = MAX_IMPORT_LINE_BYTES,
        max_content_bytes: int = paths.MAX_CONTENT_BYTES,
        progress: ProgressFn | None = None,
        slice_rows: int = SLICE_ROWS,
    ) -> None:
        self.conn = conn
        self.slice_rows = slice_rows
        self.ns = namespace
        self.max_depth = max_depth
        self.max_line_bytes = max_line_bytes
        self.max_content_bytes = max_content_bytes
        self.progress = progress
        self.lines = 0
        self.bytes = 0
        self._implied = 0
        self._staged = 0  # rows written into the staging table
        self._params: dict[str, Any] = {}
        self._problems = _Problems()

    def _report(self, phase: str) -> None:
        if self.progress is not None:
            self.progress(ImportProgress(phase, self.lines, self.bytes))

    def run(self, source: Iterable[bytes | str]) -> ImportResult:
        started = time.monotonic()
        root = self.conn.execute(
            text("SELECT root_id FROM namespaces WHERE name = :ns"), {"ns": self.ns}
        ).scalar_one_or_none()
        if root is None:
            raise NotFound(f"no namespace {self.ns!r}")
        self.conn.execute(text(STAGE_COMPRESSION_SQL))
        self.conn.execute(text(STAGE_SQL))
        self._stage(lines_of(source, self.max_line_bytes))
        self._report("resolve")
        staged = self._resolve(root)
        self._report("insert")
        created = self._insert()
        self._report("events")
        first = self._events(created)
        self._report("done")
        return ImportResult(
            namespace=self.ns, lines=staged, created=created,
            implied_dirs=self._implied, first_seq=first,
            last_seq=None if first is None else first + created - 1,
            seconds=time.monotonic() - started,
        )

    def _stage(self, source: Iterable[bytes | str]) -> None:
        """Parse, validate and COPY every good line; the bad ones are noted in
        ``self._problems`` (raised with the other checks' after ``_resolve``)."""
        driver = Driver(self.conn)
        # psycopg's errors raised as SQLAlchemy's (a statement timeout during the
        # COPY is then typed like any other statement's).
        with driver.errors(COPY_SQL, {}):
            self._copy(driver.raw, source, self._problems)
        self._report("read")

    def _copy(self, dbapi: Any, source: Iterable[bytes | str], problems: _Problems) -> None:
        max_depth, max_bytes, max_content = (
            self.max_depth, self.max_line_bytes, self.max_content_bytes)
        # The counts are kept in locals and handed to self at each progress report and
        # at the end: attribute writes for every line were a tenth of the loop's time.
        number = staged = size = 0
        with dbapi.cursor() as cur, cur.copy(COPY_SQL) as copy:
            write = copy.write_row
            try:
                for number, raw in enumerate(source, 1):
                    size += len(raw)
                    if number % PROGRESS_EVERY == 0:
                        self.lines, self.bytes = number, size
                        self._report("read")
                    if not raw or raw.isspace():
                        continue  # blank lines (a trailing newline, spacing) carry no node
                    if len(raw) > max_bytes // 4 and line_bytes(raw) > max_bytes:
                        problems.add(number, line_too_long(max_bytes), TooLarge)
                        continue
                    try:
                        row = parse_line(raw, max_depth, max_content)
                    except CoordinatorError as exc:
                        problems.add(number, str(exc), type(exc))
                        continue
                    # Staged even after a bad line, for the checks of _resolve; the
                    # refusal then rolls the transaction back.
                    write((number, *row))
                    staged += 1
            except LineTooLong as exc:  # the reader stopped inside that line
                problems.add(exc.line, exc.reason, TooLarge)
            finally:
                self.lines, self.bytes, self._staged = number, size, staged

    def _resolve(self, root: Any) -> int:
        conn = self.conn
        staged = self._staged
        problems = self._problems
        try:
            # Unique: building it is the duplicate check; the query that names the
            # lines runs only when it fails.
            with conn.begin_nested():
                conn.execute(text("CREATE UNIQUE INDEX ON pk_import_stage (path)"))
        except DBAPIError as exc:
            if sqlstate(exc) != UNIQUE_VIOLATION:
                raise
            rows = conn.execute(text(DUPLICATES_SQL), {"limit": MAX_REPORTED}).all()
            for path, lines, _ in rows:
                where = ", ".join(map(str, lines[1:]))
                problems.add(lines[0], f"{path} appears again on line(s) {where}",
                             InvalidImport)
            problems.count_more(rows)
            # The first line of each path stays, so the checks below run on one row a
            # path (and report their problems in this same refusal).
            conn.execute(text(DROP_DUPLICATES_SQL))
            conn.execute(text("CREATE UNIQUE INDEX ON pk_import_stage (path)"))
        conn.execute(text(IMPLIED_SQL))
        rows = conn.execute(text(FILE_UNDER_FILE_SQL), {"limit": MAX_REPORTED}).all()
        for line, parent, parent_line, _ in rows:
            problems.add(line, f"{parent} is a file (line {parent_line})", NotADirectory)
        problems.count_more(rows)
        ids = {"ns": self.ns, "root": root}
        if conn.execute(text(HAS_CHILDREN_SQL), ids).scalar_one():
            # The walk down the staged paths joins each step's children by parent_path.
            conn.execute(text("CREATE INDEX ON pk_import_stage (parent_path)"))
            conn.execute(text(EXISTING_SQL), ids)
        else:
            # An empty namespace (the first import into it): nothing can exist already,
            # so neither the walk nor its index is needed, only its (empty) table.
            conn.execute(text(EXISTING_SQL + " WITH NO DATA"), ids)
        rows = conn.execute(text(CLASHES_SQL), {"limit": MAX_REPORTED}).all()
        for line, path, implied, _ in rows:
            if implied:  # a parent this line needs is an existing file
                problems.add(line, f"{path} is a file", NotADirectory)
            else:
                problems.add(line, f"{path} already exists", AlreadyExists)
        problems.count_more(rows)
        problems.raise_if_any()
        prefix, start = id_prefix()
        self._params = {"ns": self.ns, "root": root, "id_prefix": prefix, "id_start": start}
        return staged

    def _slices(self, count: int) -> Iterator[dict[str, int]]:
        """The rank ranges (``first``, ``last``) of the slices of ``count`` new nodes."""
        for first in range(1, count + 1, self.slice_rows):
            yield {"first": first, "last": min(count, first + self.slice_rows - 1)}

    def _insert(self) -> int:
        conn = self.conn
        conn.execute(text(NEW_NODES_SQL), self._params)
        count, implied = conn.execute(text(
            "SELECT count(*), count(*) FILTER (WHERE implied) FROM pk_import_new")).one()
        self._implied = int(implied)
        if count > self.slice_rows:
            conn.execute(text(RANK_INDEX_SQL))
            conn.execute(text(RANK_STATISTICS_SQL))
            conn.execute(text("ANALYZE pk_import_new (rank)"))
        inserted = 0
        try:
            with conn.begin_nested():
                mode = conn.execute(text("SHOW plan_cache_mode")).scalar_one()
                conn.execute(text(PLAN_MODE_SQL), {"mode": "force_generic_plan"})
                for ranks in self._slices(int(count)):
                    inserted += int(conn.execute(
                        text(INSERT_NODES_SQL), {**self._params, **ranks}).rowcount)
                conn.execute(text(PLAN_MODE_SQL), {"mode": mode})
            return inserted
        except DBAPIError as exc:
            state = sqlstate(exc)
            # A concurrent change since the existence check: a create of one of our paths,
            # a delete of a directory we import into, a dropped namespace.
            if state == UNIQUE_VIOLATION:
                raise Conflict(
                    "a path of the import was created concurrently; run the import again "
                    "to see which line"
                ) from exc
            if state == FOREIGN_KEY_VIOLATION:
                raise NotFound(
                    "a directory the import adds to was deleted concurrently (or the "
                    "namespace was dropped)"
                ) from exc
            raise

    def _events(self, count: int) -> int | None:
        """Take a run of consecutive blocks (the last statements before COMMIT) and
        write the events into it; the base position, or None without events."""
        if count == 0:
            return None
        k = -(-count // POSITION_BLOCK)
        # Before the claim: readers of other namespaces need not wait for this one
        # (coordinator/event_appender.py, "Imports"). Its events are all of self.ns.
        self.conn.execute(text(f"SELECT {IMPORT_MARK_SQL}"), {"ns": self.ns})
        claimed: list[int] = []
        base = None
        for _ in range(100):
            claimed += [int(v) for v in self.conn.execute(
                text(CLAIM_BLOCKS_SQL), {"k": k, "ns": self.ns}).scalars()]
            base = contiguous_run(claimed, k)
            if base is not None:
                break
        if base is None:  # blocks unused are holes, which readers skip
            raise Conflict("could not claim consecutive event positions; run it again")
        for ranks in self._slices(count):
            self.conn.execute(text(INSERT_EVENTS_SQL), {**self._params, "base": base, **ranks})
        return base

