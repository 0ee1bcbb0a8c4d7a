"""Structured log lines: one JSON object per line, with the event's fields.

``log(logger, level, "batch_applied", partition=1, events=10)`` writes
``{"ts": ..., "level": "info", "event": "batch_applied", "partition": 1, ...}``
once ``configure()`` installed the JSON formatter (the CLI does).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(level: int = logging.INFO) -> None:
    """Send log records to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The HTTP client logs every request at INFO: too chatty for a worker.
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    logging.getLogger("opensearch").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def log(
    logger: logging.Logger, level: int, event: str, exc_info: bool = False, **fields: Any
) -> None:
    """Log ``event`` with structured ``fields``."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields}, exc_info=exc_info)
