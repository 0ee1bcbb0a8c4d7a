"""``pathkeeper indexer status``: per partition, its checkpoint, lag and holder; dead
letters; writers the log readers wait for; with ``--es-url``, the alias. As text or, with
``--json``, as one JSON object for scripts and monitors.

Exit status: 0 all well; 1 (``EXIT_WARNING``) when events wait that no worker will index
(a partition with lag and no holder, or a consumer that never ran while the log holds
events), said on one ``warning:`` line; 3 when the index behind the alias is lost."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from coordinator.indexing import consumer_for
from pathkeeper.cli.options import (
    consumer_option,
    search_options,
    servers_options,
    servers_shards,
    worker_alias_option,
)

if TYPE_CHECKING:
    from coordinator.shard_map import Shard
    from indexer.search_client import SearchSecurity

#: Events wait that no running worker will index.
EXIT_WARNING = 1
EXIT_INDEX_MISSING = 3


def no_worker_warning(name: str, parts: list[Any], log_has_events: bool) -> str | None:
    """The warning when events wait with no worker to index them, else None."""
    if not parts:
        return (f"consumer {name} never ran while the event log holds events (start "
                "pathkeeper indexer run)") if log_has_events else None
    orphans = [p for p in parts if p.lag_events and not p.holder_pid]
    if not orphans:
        return None
    waiting = sum(p.lag_events for p in orphans)
    oldest = max(p.lag_seconds for p in orphans)
    numbers = ", ".join(str(p.partition) for p in orphans)
    noun = "partition" if len(orphans) == 1 else "partitions"
    return (f"no worker holds {noun} {numbers} while {waiting} events wait (the oldest "
            f"{oldest:.0f} s): start pathkeeper indexer run")


@click.command("status")
@servers_options
@worker_alias_option
@consumer_option
@search_options(url_required=False)
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: consumer, partitions (checkpoint, lag_events, "
                   "lag_seconds, holder_pid, namespaces), lag_events, lag_seconds, "
                   "dead_letters_pending, held_back_by, alias, warnings, and shards "
                   "(the same per shard).")
def status_cmd(database_url: str | None, directory_url: str | None, alias: str, consumer: str,
               es_url: str | None, search_security: SearchSecurity, as_json: bool) -> None:
    """Per partition and namespace: lag (events, seconds), checkpoint, holder; dead letters;
    with --es-url, whether the index behind the alias is there. Exit 1 with a warning when
    events wait in a partition no worker holds (or the consumer never ran), 3 when the
    index is lost."""
    code = report(servers_shards(database_url, directory_url), alias,
                  consumer_for(alias, consumer), es_url, search_security, as_json)
    if code:
        sys.exit(code)


def _partition_doc(p: Any, shard: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {} if shard is None else {"shard": shard}
    doc.update({
        "partition": p.partition, "checkpoint": p.checkpoint,
        "lag_events": p.lag_events, "lag_seconds": round(p.lag_seconds, 3),
        "holder_pid": p.holder_pid,
        "updated_at": p.updated_at.isoformat() if p.updated_at else None,
        "namespaces": [{"namespace": n.namespace, "events": n.events,
                        "seconds": round(n.seconds, 3)} for n in p.namespaces],
    })
    return doc


def report(shards: list[Shard], alias: str, name: str, es_url: str | None,
           search_security: SearchSecurity, as_json: bool) -> int:
    """Print the status of consumer ``name`` over ``shards``; returns the exit status.
    With one shard the output is that of one server; with several, each partition names
    its shard, the JSON gains ``shards`` (each shard's partitions, lag, dead letters,
    writers, or its ``error``), and the totals are over all shards."""
    from indexer import status

    several = len(shards) > 1
    per_shard = status.shards_status(shards, name)
    parts = [p for s in per_shard for p in s.partitions]
    pending = sum(s.dead_letters_pending for s in per_shard)
    held_back = [w for s in per_shard for w in s.held_back_by]
    warnings = []
    for s in per_shard:
        if s.error is not None:
            warnings.append(f"shard {s.shard} did not answer: {s.error}")
            continue
        warning = no_worker_warning(name, s.partitions, s.log_has_events)
        if warning:
            warnings.append(f"shard {s.shard}: {warning}" if several else warning)
    targets, missing = _alias(es_url, search_security, alias, parts) if es_url else (None, None)
    if as_json:
        doc: dict[str, Any] = {
            "consumer": name, "ran": bool(parts),
            "partitions": [_partition_doc(p, s.shard if several else None)
                           for s in per_shard for p in s.partitions],
            "lag_events": sum(p.lag_events for p in parts),
            "lag_seconds": round(max((p.lag_seconds for p in parts), default=0.0), 3),
            "dead_letters_pending": pending,
            "held_back_by": [str(w) for w in held_back],
            "warnings": warnings,
            "shards": [{
                "name": s.shard, "error": s.error,
                "partitions": [_partition_doc(p, None) for p in s.partitions],
                "lag_events": sum(p.lag_events for p in s.partitions),
                "lag_seconds": round(max((p.lag_seconds for p in s.partitions),
                                         default=0.0), 3),
                "dead_letters_pending": s.dead_letters_pending,
                "held_back_by": [str(w) for w in s.held_back_by],
            } for s in per_shard],
        }
        if es_url:
            doc["alias"] = {"name": alias, "indices": targets or []}
            if missing:
                doc["alias"]["error"] = missing
        click.echo(json.dumps(doc, indent=2))
    else:
        for s in per_shard:
            if several:
                click.echo(f"shard {s.shard}:" + (f" did not answer: {s.error}" if s.error
                                                  else ""))
            if s.error is None:
                _print_text(name, s.partitions, s.dead_letters_pending, s.held_back_by)
        if targets is not None and not missing:
            click.echo(f"alias {alias}: {', '.join(targets) or 'not created yet'}")
    if missing:
        click.echo(f"error: {missing}", err=True)
        return EXIT_INDEX_MISSING
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    return EXIT_WARNING if warnings else 0


def _alias(
    es_url: str, security: SearchSecurity, alias: str, parts: list[Any]
) -> tuple[list[str], str | None]:
    """The indices behind ``alias``, and what to do when it is lost (else None)."""
    from indexer.elasticsearch_index import alias_targets, missing_alias_message, our_indices
    from indexer.search_client import open_search

    es = open_search(es_url, security=security, request_timeout=30)
    try:
        targets = alias_targets(es, alias)
        indexed = any(p.checkpoint > 0 for p in parts)
        leftovers = our_indices(es, alias)
        if not targets and (indexed or leftovers):
            return targets, missing_alias_message(alias, indexed, leftovers)
        return targets, None
    finally:
        es.close()


def _print_text(name: str, parts: list[Any], pending: int, held_back: list[Any]) -> None:
    if not parts:
        click.echo(f"consumer {name}: never ran")
    else:
        click.echo(f"consumer {name}: {len(parts)} partitions")
        header = f"{'partition':>9} {'checkpoint':>16} {'lag_events':>10} {'lag_s':>8}"
        click.echo(header + "  holder_pid")
        for p in parts:
            holder = str(p.holder_pid) if p.holder_pid else "-"
            click.echo(f"{p.partition:>9} {p.checkpoint:>16} {p.lag_events:>10} "
                       f"{p.lag_seconds:>8.2f}  {holder}")
            for ns in p.namespaces:
                click.echo(f"{'':>9} namespace {ns.namespace}: {ns.events} events, "
                           f"{ns.seconds:.2f} s behind")
    click.echo(f"dead letters pending: {pending}")
    if held_back:
        click.echo("log readers are waiting for event log writers in flight:")
        for w in held_back:
            click.echo(f"  {w}")
