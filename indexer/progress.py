"""Progress of long commands: a rich bar on a terminal, periodic log lines otherwise,
and a one-line summary at the end (counts, seconds, rate)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TextIO

log = logging.getLogger("pathkeeper.progress")


@dataclass
class Summary:
    """What a command did: counters by name (documents, events, ...) and seconds."""

    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def rate(self, name: str) -> float:
        return self.counts.get(name, 0) / self.seconds if self.seconds > 0 else 0.0

    def line(self, main: str = "documents") -> str:
        parts = [f"{k}={v}" for k, v in self.counts.items()]
        parts.append(f"seconds={self.seconds:.2f}")
        if main in self.counts:
            parts.append(f"rate={self.rate(main):.0f} {main}/s")
        return " ".join(parts)


class Progress:
    """Report progress of one phase at a time.

    ``phase(name, total)`` starts a phase (``total`` may be None: no ETA);
    ``advance(n)`` counts work in it. On a TTY (or ``tty=True``) a rich progress
    bar shows count, rate and ETA; otherwise a log line every ``interval``
    seconds. Counts also accumulate into ``summary`` under the phase's ``unit``.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        tty: bool | None = None,
        interval: float = 5.0,
        enabled: bool = True,
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.enabled = enabled
        self.summary = Summary()
        self._start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        self._phase = ""
        self._unit = ""
        self._done = 0
        self._total: int | None = None
        self._phase_start = self._start
        self._last_log = self._start

    def __enter__(self) -> Progress:
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end_phase()
        self.summary.seconds = time.monotonic() - self._start
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None

    def phase(self, name: str, total: int | None = None, unit: str = "documents") -> None:
        self._end_phase()
        self._phase, self._unit, self._total, self._done = name, unit, total, 0
        self._phase_start = self._last_log = time.monotonic()
        self.summary.counts.setdefault(unit, 0)
        if self._bar is not None:
            self._task = self._bar.add_task(name, total=total, rate="")

    def advance(self, n: int = 1) -> None:
        self._done += n
        self.summary.counts[self._unit] = self.summary.counts.get(self._unit, 0) + n
        now = time.monotonic()
        rate = self._done / max(now - self._phase_start, 1e-9)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=n, rate=f"{rate:,.0f} {self._unit}/s")
        elif self.enabled and now - self._last_log >= self.interval:
            self._last_log = now
            total = f"/{self._total}" if self._total is not None else ""
            eta = ""
            if self._total and rate > 0:
                eta = f" eta={max(self._total - self._done, 0) / rate:.0f}s"
            log.info("%s: %d%s %s, %.0f/s%s", self._phase, self._done, total, self._unit,
                     rate, eta)

    def count(self, name: str, n: int = 1) -> None:
        """Add to a summary counter without showing it as progress."""
        self.summary.counts[name] = self.summary.counts.get(name, 0) + n

    def note(self, message: str) -> None:
        """A one-off line (phase changes, decisions), on the bar's console or the log."""
        if self._bar is not None:
            self._bar.console.print(message)
        elif self.enabled:
            log.info("%s", message)

    def _end_phase(self) -> None:
        if not self._phase:
            return
        elapsed = time.monotonic() - self._phase_start
        if self._bar is None and self.enabled:
            log.info("%s: done, %d %s in %.2fs", self._phase, self._done, self._unit, elapsed)
        elif self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=self._done, completed=self._done)
        self._phase = ""
