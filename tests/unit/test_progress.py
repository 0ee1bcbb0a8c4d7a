"""Progress: periodic log lines off a terminal, a rich bar on one, a summary at the end."""

from __future__ import annotations

import io
import logging

import pytest

from indexer.progress import Progress


def test_plain_lines_when_not_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pathkeeper.progress")
    with Progress(stream=io.StringIO(), tty=False, interval=0.0) as progress:
        progress.phase("load documents", total=3, unit="documents")
        for _ in range(3):
            progress.advance(1)
        progress.phase("catch up", unit="events")
        progress.advance(5)
    text = caplog.text
    assert "load documents: 3/3 documents" in text and "eta=" in text
    assert "load documents: done, 3 documents" in text
    assert "catch up: done, 5 events" in text
    line = progress.summary.line()
    assert "documents=3" in line and "events=5" in line and "rate=" in line


def test_a_bar_on_a_terminal() -> None:
    out = io.StringIO()
    with Progress(stream=out, tty=True) as progress:
        progress.phase("load documents", total=10, unit="documents")
        progress.advance(10)
        progress.note("alias swapped")
    rendered = out.getvalue()
    assert "load documents" in rendered and "10/10" in rendered and "alias swapped" in rendered
    assert progress.summary.counts == {"documents": 10}
