"""The progress bar of ``pathkeeper import``: bytes of a file (a percentage) or lines
of a stream, then the phases the database works through (rich, on stderr)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from coordinator.importer import ImportProgress, ProgressFn

PHASES = {
    "read": "reading and checking",
    "resolve": "resolving parents",
    "insert": "inserting nodes",
    "events": "writing events",
    "done": "committing",
}


def _size(file: BinaryIO) -> int | None:
    """The file's size when it is a regular file (stdin or a pipe has none)."""
    try:
        st = os.fstat(file.fileno())
    except (OSError, ValueError):
        return None
    import stat

    return st.st_size if stat.S_ISREG(st.st_mode) else None


@contextmanager
def progress_bar(file: BinaryIO, show: bool) -> Iterator[ProgressFn | None]:
    """A callback for ``Coordinator.import_nodes`` that draws a bar, or None when
    ``show`` is false (no terminal: nothing to draw on, and no log noise)."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    total = _size(file)
    columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TextColumn("{task.fields[lines]:,} lines"), TimeElapsedColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(PHASES["read"], total=total, lines=0)

        def on_progress(p: ImportProgress) -> None:
            # After reading, the bar stays full and the description names the phase.
            bar.update(task, completed=p.bytes, lines=p.lines,
                       description=PHASES.get(p.phase, p.phase),
                       total=total if p.phase == "read" else p.bytes)

        yield on_progress
