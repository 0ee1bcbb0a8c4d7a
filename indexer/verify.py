"""Compare PostgreSQL with Elasticsearch, and the event log with ``nodes``.

* ``verify_index``: for each namespace, streams the expected documents (a
  recursive walk of ``nodes`` sorted by id, from a REPEATABLE READ snapshot, by a
  server-side cursor) and the indexed ones (a point-in-time + ``search_after``
  sorted by ``node_id``) and merges them: memory stays bounded whatever the size.
  Documents that differ are then re-checked: the live worker may simply not have
  applied the latest events yet. Each re-check round takes a safe position B,
  lets ``settle(B)`` wait until the live index has applied everything <= B (the
  worker's read-your-writes wait), and compares fresh PostgreSQL state with a
  realtime ``mget``; only what still differs after every round is drift.
  ``repair`` rewrites exactly those documents from PostgreSQL at external version
  B (a safe position read after the drift was confirmed: any later event the
  live worker applies carries a higher version and still wins).
* ``verify_log``: folds the whole log (``indexer.setfold``: the newest stored snapshot
  plus the events after it) and compares it with ``nodes``, both read in ONE
  REPEATABLE READ snapshot (each change writes nodes and events in one transaction,
  so the snapshot is a consistent cut without any position bound); the comparison
  is a join in PostgreSQL.

Ordering note: PostgreSQL sorts uuids by their bytes, which is the order of
their lowercase hex text, i.e. of the ``node_id`` keyword in Elasticsearch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prometheus_client import Gauge
from sqlalchemy import Connection, text

from coordinator import Coordinator, Node, NotFound
from coordinator.event_reader import OWNED_NAMESPACE_SQL
from coordinator.indexing import consumer_for
from coordinator.subtree import subtree_cte

from . import bulk, contract, deadletters, elasticsearch_index, setfold
from .bulk import CHUNK_BYTES, resolve_conflicts, stream_answers
from .contract import (
    delete_action,
    differing_fields,
    expected_document,
    index_action,
    is_indexed,
)
from .errors import ReplayError
from .index_scan import stream_index_docs
from .live_nodes import node_exists, owned_namespaces, placed_elsewhere, walk_nodes
from .log_scan import current_bound
from .progress import Progress
from .replay_loader import record_left_out
from .search_engine import SearchEngine

log = logging.getLogger("pathkeeper.verify")

VERIFY_DRIFT = Gauge(
    "pathkeeper_verify_drift",
    "Documents that differ between PostgreSQL and Elasticsearch at the last scheduled verify "
    "(-1: the last run failed)",
)

PAGE = 1000

#: ``settle(position)``: wait until the live index reflects every event <= position;
#: False if it did not happen in time (the worker is down or far behind).
Settle = Callable[[int], bool]


@dataclass(frozen=True)
class Drift:
    """One document that is wrong: ``missing`` from the index, ``extra`` in it, or
    ``differs`` in ``fields``."""

    kind: str
    namespace: str
    node_id: str
    fields: tuple[str, ...] = ()


@dataclass
class VerifyReport:
    """The outcome of ``verify_index``."""

    alias: str
    namespaces: int = 0
    compared: int = 0
    drift: list[Drift] = field(default_factory=list)
    candidates: int = 0
    repaired: int = 0
    not_repaired: list[Drift] = field(default_factory=list)
    #: Documents that differ because the worker (or a rebuild) could not write them:
    #: they have a pending dead letter (``fields``: its error). Known and recorded, so
    #: not drift; ``pathkeeper indexer dead-letters`` lists and retries them.
    dead_lettered: list[Drift] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.drift

    def by_kind(self) -> dict[str, int]:
        counts = {"missing": 0, "extra": 0, "differs": 0}
        for d in self.drift:
            counts[d.kind] += 1
        return counts


@dataclass
class LogReport:
    """The outcome of ``verify_log``: nodes the fold of the log gets wrong."""

    events: int = 0
    nodes: int = 0
    drift: list[Drift] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    anomaly_count: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.drift and not self.anomaly_count


# ------------------------------------------------------------------ streams


def expected_docs(conn: Connection, namespace: str) -> Iterator[dict[str, Any]]:
    """The documents ``nodes`` says ``namespace`` should have, sorted by node id."""
    for node in walk_nodes(conn, namespace, order_by_id=True):
        if is_indexed(node):
            yield expected_document(node)


def merge(
    namespace: str,
    expected: Iterator[dict[str, Any]],
    actual: Iterator[dict[str, Any]],
    key: str = "node_id",
) -> Iterator[Drift | None]:
    """Merge two streams sorted by ``key``: a ``Drift`` per difference, ``None`` per
    document found equal."""
    sentinel: dict[str, Any] = {}
    e, a = next(expected, sentinel), next(actual, sentinel)
    while e is not sentinel or a is not sentinel:
        if a is sentinel or (e is not sentinel and e[key] < a[key]):
            yield Drift("missing", namespace, e[key])
            e = next(expected, sentinel)
        elif e is sentinel or a[key] < e[key]:
            yield Drift("extra", namespace, a[key])
            a = next(actual, sentinel)
        else:
            diff = differing_fields(e, a)
            yield Drift("differs", namespace, e[key], diff) if diff else None
            e, a = next(expected, sentinel), next(actual, sentinel)


# ------------------------------------------------------------- the index


def _scan(
    coord: Coordinator,
    es: SearchEngine,
    alias: str,
    namespaces: Sequence[str] | None,
    report: VerifyReport,
    progress: Progress,
    elsewhere: Collection[str] = (),
    strays: bool = True,
) -> list[Drift]:
    candidates: list[Drift] = []
    with coord.engine.connect() as conn, conn.begin():
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        # Idle between fetches while Elasticsearch pages: not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        existing = owned_namespaces(conn)
        # Not compared here and not extra: namespaces of other shards (``elsewhere``, the
        # caller's) and those being moved in or moved away on this one.
        skipped = [*elsewhere, *placed_elsewhere(conn)]
        wanted = existing if namespaces is None else [n for n in namespaces if n in existing]
        report.namespaces = len(wanted)
        progress.phase("compare", unit="documents")
        for ns in wanted:
            for d in merge(ns, expected_docs(conn, ns), stream_index_docs(es, alias, ns)):
                report.compared += 1
                progress.advance(1)
                if d is not None:
                    candidates.append(d)
        # Documents of namespaces PostgreSQL does not have (dropped, or never there).
        gone = [n for n in (namespaces or []) if n not in existing and n not in skipped]
        streams = [stream_index_docs(es, alias, n) for n in gone] if strays else []
        if namespaces is None and strays:
            streams.append(stream_index_docs(
                es, alias, exclude_namespaces=[*existing, *skipped]))
        for stream in streams:
            for doc in stream:
                report.compared += 1
                progress.advance(1)
                candidates.append(Drift("extra", doc["namespace"], doc["node_id"]))
    return candidates


def _fresh_node(coord: Coordinator, namespace: str, node_id: str) -> Node | None:
    try:
        node = coord.get(namespace, node_id)
    except NotFound:
        return None
    return node if is_indexed(node) else None


def _recheck(
    coord: Coordinator, es: SearchEngine, alias: str, candidates: list[Drift]
) -> list[Drift]:
    """The candidates that still differ between fresh PostgreSQL state and a realtime
    read of the index."""
    still: list[Drift] = []
    for start in range(0, len(candidates), PAGE):
        chunk = candidates[start:start + PAGE]
        got = es.mget(
            [{"_id": d.node_id, "routing": d.namespace} for d in chunk], index=alias
        )["docs"]
        for d, hit in zip(chunk, got, strict=True):
            node = _fresh_node(coord, d.namespace, d.node_id)
            found = hit.get("found", False)
            if node is None and found:
                still.append(Drift("extra", d.namespace, d.node_id))
            elif node is not None and not found:
                still.append(Drift("missing", d.namespace, d.node_id))
            elif node is not None:
                diff = differing_fields(expected_document(node), hit["_source"])
                if diff:
                    still.append(Drift("differs", d.namespace, d.node_id, diff))
    return still


def repair(
    coord: Coordinator, es: SearchEngine, alias: str, drift: Sequence[Drift]
) -> tuple[int, list[Drift]]:
    """Rewrite exactly the drifted documents from PostgreSQL at version = a safe
    position read now, also those edited by hand to a higher version (see
    ``bulk.resolve_conflicts``); returns (repaired, not repaired: the live worker wrote
    a newer version meanwhile, or the document is larger than the search server takes
    in a request and is a dead letter now)."""
    targets = elasticsearch_index.alias_targets(es, alias)
    if not targets:
        raise NotFound(f"alias {alias!r} does not exist")
    index = targets[-1]
    bound = current_bound(coord.engine)
    actions: list[dict[str, Any]] = []
    for d in drift:
        node = _fresh_node(coord, d.namespace, d.node_id)
        if node is None:
            actions.append(delete_action(index, d.namespace, d.node_id, bound))
        else:
            actions.append(index_action(index, node, bound))
    done = 0
    conflicts: list[tuple[Drift, dict[str, Any]]] = []
    drift_of = {(a["routing"], a["_id"]): d for d, a in zip(drift, actions, strict=True)}
    too_large: list[dict[str, Any]] = []
    for answer in stream_answers(es, actions, too_large, chunk_size=PAGE,
                                 max_chunk_bytes=CHUNK_BYTES, max_retries=5):
        indexed, deleted, failed = answer.tally()
        done += indexed + deleted
        for action, op, item in failed:
            d = drift_of[(action["routing"], action["_id"])]
            if item.get("status") == 404 and op == "delete":
                done += 1
            elif item.get("status") == 409:
                conflicts.append((d, action))
            else:
                raise ReplayError(f"repair of {d} failed: {({op: item})}")
    # Larger than the search server takes (a drift the worker has not met yet): a dead
    # letter, as the worker would record it, and not repaired.
    left_out = [bulk.too_large(a) for a in too_large]
    record_left_out(coord.engine, consumer_for(alias), left_out)
    # A version above ours: a newer write of the live worker, or a document edited by
    # hand (its version ran ahead of the seq it stores). Only the second is replaced;
    # a stored seq past every committed position is made up, so it is replaced too.
    replaced = resolve_conflicts(es, [a for _, a in conflicts],
                                 newest_legit=current_bound(coord.engine),
                                 alive=partial(node_exists, coord.engine))
    done += sum(replaced)
    refused = [d for (d, _), r in zip(conflicts, replaced, strict=True) if not r]
    refused += [drift_of[(r.namespace, r.node_id)] for r in left_out]
    es.refresh(index)
    return done, refused


def verify_index(
    coord: Coordinator,
    es: SearchEngine,
    *,
    alias: str = contract.DEFAULT_ALIAS,
    namespaces: Sequence[str] | None = None,
    repair_drift: bool = False,
    settle: Settle | None = None,
    rounds: int = 3,
    progress: Progress | None = None,
    elsewhere: Collection[str] = (),
    strays: bool = True,
) -> VerifyReport:
    """Find (and with ``repair_drift``, fix) documents that differ between PostgreSQL
    and the index behind ``alias``. See the module docstring for how lag is told
    apart from drift.

    Over several shards, ``coord`` is one shard's and this compares its namespaces:
    ``elsewhere`` names the other shards' (their documents are not extra here), and
    ``strays=False`` leaves documents of namespaces no shard has to another shard's
    run (``indexer.verify_shards``), so they are reported once."""
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    report = VerifyReport(alias)
    es.refresh(alias)
    candidates = _scan(coord, es, alias, namespaces, report, progress, elsewhere, strays)
    report.candidates = len(candidates)
    for _ in range(rounds if candidates else 0):
        settled = settle is not None and settle(current_bound(coord.engine))
        candidates = _recheck(coord, es, alias, candidates)
        if not candidates or not settled:
            # Without a live worker to wait for, what differs now is drift.
            break
    letters = deadletters.pending_errors(
        coord.engine, consumer_for(alias), [(d.namespace, d.node_id) for d in candidates]
    )
    report.dead_lettered = [
        Drift(d.kind, d.namespace, d.node_id, (letters[(d.namespace, d.node_id)],))
        for d in candidates if (d.namespace, d.node_id) in letters
    ]
    candidates = [d for d in candidates if (d.namespace, d.node_id) not in letters]
    report.drift = candidates
    if repair_drift and candidates:
        report.repaired, report.not_repaired = repair(coord, es, alias, candidates)
    report.seconds = time.monotonic() - started
    return report


# ------------------------------------------------------------------ the log


#: The fields ``verify_log`` compares, as ``Drift.fields`` names them.
LOG_FIELDS = ("content", "kind", "metadata", "name", "parent_id", "path", "version")

# The nodes table with paths, for the namespaces verified (same columns as the fold's).
_TABLE_COLUMNS = ("namespace", "id", "parent_id", "name", "kind", "content", "metadata", "version")


def _table_walk(table: str, ns_filter: str) -> str:
    # Without namespaces that are not this server's (being copied here, or moved away),
    # as the fold leaves out their events.
    owned = OWNED_NAMESPACE_SQL.format(ns="nodes.namespace")
    walk = subtree_cte(_TABLE_COLUMNS, f"parent_id IS NULL {ns_filter} AND {owned}",
                       top_path="CAST('/' AS text)")
    return f"CREATE TEMPORARY TABLE {table} AS {walk} SELECT * FROM sub"


# One row per node that differs: missing from the fold, extra in it, or which fields.
_LOG_DIFF = """
SELECT coalesce(t.namespace, f.namespace) AS namespace, coalesce(t.id, f.id) AS id,
       f.id IS NULL AS missing, t.id IS NULL AS extra,
       {flags}
FROM {table} t FULL JOIN {folded} f ON f.namespace = t.namespace AND f.id = t.id
WHERE t.id IS NULL OR f.id IS NULL OR {any_differs}
ORDER BY 1, 2
"""


def verify_log(
    coord: Coordinator,
    *,
    namespaces: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> LogReport:
    """Fold the log and compare it with ``nodes`` (ids, parents, names, kinds, content,
    metadata, versions, paths), both from one snapshot.

    The fold is ``indexer.setfold`` (the newest stored snapshot plus the events after
    it), run in the same REPEATABLE READ transaction as the read of ``nodes``, and the
    comparison is one join in PostgreSQL: only differences come back to Python."""
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    report = LogReport()
    engine = coord.engine
    ns_filter = "" if namespaces is None else "AND namespace = ANY(:nss)"
    with engine.connect() as conn:
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        progress.phase("fold events", unit="events")
        try:
            folded = setfold.fold_into(conn, until=2**62, namespaces=namespaces)
        except setfold.LogCompacted as exc:
            raise ReplayError(str(exc)) from exc
        try:
            report.events = folded.events
            progress.advance(folded.events)
            progress.phase("compare with nodes", unit="nodes")
            table = f"{folded.tables['nodes']}_table"
            params = {"nss": list(namespaces or ())}
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            conn.execute(text(_table_walk(table, ns_filter)), params)
            conn.execute(text(f"ANALYZE {table}"))
            flags = ", ".join(
                f"t.{c} IS DISTINCT FROM f.{c} AS d_{c}" for c in LOG_FIELDS
            )
            any_differs = " OR ".join(f"t.{c} IS DISTINCT FROM f.{c}" for c in LOG_FIELDS)
            report.nodes = int(conn.execute(text(
                f"SELECT count(*) FROM {table} t FULL JOIN {folded.tables['nodes']} f "
                "ON f.namespace = t.namespace AND f.id = t.id"
            )).scalar_one())
            progress.advance(report.nodes)
            rows = conn.execute(text(_LOG_DIFF.format(
                flags=flags, any_differs=any_differs, table=table,
                folded=folded.tables["nodes"],
            )))
            for r in rows:
                # From the log's point of view: "missing" = in nodes, not in the fold.
                if r.missing:
                    report.drift.append(Drift("missing", r.namespace, str(r.id)))
                elif r.extra:
                    report.drift.append(Drift("extra", r.namespace, str(r.id)))
                else:
                    fields = tuple(c for c in LOG_FIELDS if getattr(r, f"d_{c}"))
                    report.drift.append(Drift("differs", r.namespace, str(r.id), fields))
            report.anomaly_count = folded.anomalies.count
            report.anomalies = list(folded.anomalies.first)
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        finally:
            conn.rollback()  # the temporary tables were made in this transaction: gone
    report.seconds = time.monotonic() - started
    return report


# ------------------------------------------------------------- scheduling


def scheduled_verify(
    coord: Coordinator,
    es: SearchEngine,
    alias: str = contract.DEFAULT_ALIAS,
    settle: Settle | None = None,
) -> int:
    """Run ``verify_index`` and publish the drift count as ``pathkeeper_verify_drift``
    (-1 if it failed). For an APScheduler cron job in the worker; never raises."""
    try:
        report = verify_index(coord, es, alias=alias, settle=settle)
    except Exception:
        log.exception("scheduled verify failed")
        VERIFY_DRIFT.set(-1)
        return -1
    VERIFY_DRIFT.set(len(report.drift))
    if report.drift:
        log.warning("verify: %d drifted documents %s", len(report.drift), report.by_kind())
    else:
        log.info("verify: no drift in %d documents", report.compared)
    return len(report.drift)


def cron_trigger(cron: str) -> Any:
    """An APScheduler ``CronTrigger`` for a crontab expression: the standard five fields
    (minute hour day month day-of-week, e.g. ``"17 3 * * *"``) or six with a leading
    seconds field (``"*/5 * * * * *"``, for tests). Raises ``ValueError`` if invalid.
    APScheduler 3 numbers weekdays from 0 = Monday (crontab: 0 = Sunday): prefer
    names (``mon``, ``sun``) in the day-of-week field."""
    from apscheduler.triggers.cron import CronTrigger

    fields = cron.split()
    if len(fields) == 6:
        second, minute, hour, day, month, day_of_week = fields
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=day_of_week)
    return CronTrigger.from_crontab(cron)


def add_verify_job(scheduler: Any, job: Callable[[], object], cron: str) -> Any:
    """Add ``job`` (e.g. ``functools.partial(scheduled_verify, coord, es)``) to an
    APScheduler scheduler on a crontab expression (see ``cron_trigger``)."""
    return scheduler.add_job(
        job, cron_trigger(cron), id="pathkeeper-verify",
        max_instances=1, coalesce=True, replace_existing=True,
    )
