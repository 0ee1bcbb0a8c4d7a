"""The one log setup of every ``pathkeeper`` command: JSON lines (python-json-logger) or
plain text, on stderr.

``log(logger, level, "batch_applied", partition=1, events=10)`` writes
``{"ts": ..., "level": "info", "logger": ..., "event": "batch_applied", "partition": 1}``
in JSON, ``... INFO pathkeeper.indexer batch_applied partition=1 events=10`` in text.
The format is chosen once (``--log-format``, JSON when stderr is not a terminal) and
every later ``configure`` keeps it.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

LogFormat = Literal["json", "text"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")

#: Chatty libraries: what they say at INFO is not an operator's business.
QUIET_LOGGERS = {
    # One line for every request to the search server (either engine's client).
    "elastic_transport": logging.WARNING,
    "opensearch": logging.WARNING,
    "apscheduler": logging.WARNING,
    # Loading the migration scripts logs each plugin it sets up.
    "alembic.runtime.plugins": logging.WARNING,
}

_chosen: LogFormat | None = None
#: The handler ``configure`` installed last.
_handler: logging.Handler | None = None


def _ts(record: logging.LogRecord) -> str:
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z")


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record: those given to ``log``, and the parts of an
    access log line (uvicorn's)."""
    fields: dict[str, Any] = dict(getattr(record, "fields", {}))
    if record.name == "uvicorn.access" and isinstance(record.args, tuple) \
            and len(record.args) == 5:
        client, method, path, http, status = record.args
        fields.update(client=client, method=method, path=path, http=http, status=status)
    return fields


class JsonFormatter(_LibraryJsonFormatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``event``, the fields, and
    ``exception`` with its traceback when there is one."""

    def __init__(self) -> None:
        super().__init__(json_default=str, json_ensure_ascii=False)

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        log_data.update(ts=_ts(record), level=record.levelname.lower(), logger=record.name,
                        event=record.getMessage())
        log_data.update(fields_of(record))
        if record.exc_info:
            log_data["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            log_data["exception"] = record.exc_text


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> <event> key=value ...``, the traceback below."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_ts(record), record.levelname, record.name, record.getMessage()]
        parts += [f"{k}={v}" for k, v in fields_of(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def choose_format(fmt: LogFormat | None) -> LogFormat:
    """Fix the format of every later ``configure``: ``fmt``, or JSON unless stderr is a
    terminal (where text reads better)."""
    global _chosen
    _chosen = fmt or ("text" if sys.stderr.isatty() else "json")
    return _chosen


def current_format() -> LogFormat:
    """The format chosen, or the one ``choose_format(None)`` would choose."""
    return _chosen or choose_format(None)


def configure(level: int = logging.INFO, fmt: LogFormat | None = None) -> None:
    """Send log records of ``level`` and above to stderr in the chosen format.

    Called again, it replaces the handler it installed before and leaves alone the ones
    others installed (an embedding application's, a test runner's capture)."""
    global _handler
    chosen = choose_format(fmt) if fmt is not None or _chosen is None else _chosen
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    _handler = handler
    root.setLevel(level)
    for name, quiet in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet)


def log(
    logger: logging.Logger, level: int, event: str, exc_info: bool = False, **fields: Any
) -> None:
    """Log ``event`` with structured ``fields``."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields}, exc_info=exc_info)
