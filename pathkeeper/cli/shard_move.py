"""``pathkeeper shard move NAMESPACE TARGET``: move a namespace to another database server
online (``coordinator.namespace_move``), one progress line per step with its time;
``--resume`` runs a move that stopped on from its recorded step, ``--abort`` undoes one
that stopped before its flip."""

from __future__ import annotations

import os
import time

import click

from pathkeeper.cli.options import ENV_PREFIX

DIRECTORY_URL_ENV = f"{ENV_PREFIX}_DIRECTORY_URL"
#: A test hook: stop after this step and wait there (to be killed, for crash tests).
STOP_AFTER_ENV = f"{ENV_PREFIX}_MOVE_STOP_AFTER"


def _progress(line: str) -> None:
    click.echo(f"{time.strftime('%H:%M:%S')} {line}")


@click.command("move")
@click.option("--directory-url", envvar=DIRECTORY_URL_ENV, required=True,
              help="libpq or SQLAlchemy URL of the directory database (the shards and where "
                   "each namespace lives).")
@click.option("--resume", is_flag=True,
              help="Run the namespace's move on from the step it stopped at.")
@click.option("--abort", is_flag=True,
              help="Undo the namespace's move (only before its flip).")
@click.option("--consumer", default=None, metavar="NAME",
              help="The indexer consumer the move waits for on the source (default: the "
                   "default alias's).")
@click.argument("namespace")
@click.argument("target", required=False)
def move(directory_url: str, resume: bool, abort: bool, consumer: str | None, namespace: str,
         target: str | None) -> None:
    """Move NAMESPACE to the shard TARGET, online: its writes pause for the freeze
    (about a second), its reads go on."""
    from coordinator.indexing import DEFAULT_CONSUMER
    from coordinator.namespace_move import MoveStopped, NamespaceMover

    if resume and abort:
        raise click.UsageError("--resume and --abort exclude each other")
    if (resume or abort) and target is not None:
        raise click.UsageError("--resume and --abort take the recorded move's target: "
                               "give NAMESPACE alone")
    if not (resume or abort) and target is None:
        raise click.UsageError("missing argument TARGET (the shard to move to)")
    stop_after = os.environ.get(STOP_AFTER_ENV) or None
    mover = NamespaceMover(directory_url, consumer=consumer or DEFAULT_CONSUMER,
                           progress=_progress)
    try:
        if abort:
            mover.abort(namespace)
        elif resume:
            mover.resume(namespace, stop_after=stop_after)
        else:
            assert target is not None
            mover.start(namespace, target, stop_after=stop_after)
    except MoveStopped as stopped:
        _progress(f"{stopped} ({STOP_AFTER_ENV}): waiting to be killed")
        while True:
            time.sleep(3600)
