"""What the worker's options take, checked before anything starts: crontab schedules
(``verify.cron_trigger``), retention durations (``retention.parse_duration``), byte
sizes (``elasticsearch_index.parse_byte_size``), and the CLI refusing bad ones in one
line (exit 2) with no database or search server behind the URLs it was given."""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from indexer.elasticsearch_index import content_limit_problem, parse_byte_size
from indexer.retention import parse_duration
from indexer.verify import cron_trigger
from indexer.worker import WorkerConfig
from pathkeeper.cli.main import main

RUN = ["indexer", "run", "--database-url", "postgresql://unused", "--es-url", "http://unused"]


def test_verify_is_off_by_default() -> None:
    assert WorkerConfig(database_url="postgresql://x", es_url="http://x").verify_cron is None


def test_cron_forms() -> None:
    assert "second='*'" in repr(cron_trigger("* * * * * *"))
    assert "hour='3'" in repr(cron_trigger("0 3 * * *"))
    for bad in ["", "* * *", "61 * * * *", "0 3 * * * * *", "x y z a b"]:
        with pytest.raises(ValueError):
            cron_trigger(bad)


def test_durations() -> None:
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("0") == timedelta(0)
    assert parse_duration(" 1.5m ") == timedelta(seconds=90)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="has no unit"):
        parse_duration("5")  # seconds or days? the caller must say
    with pytest.raises(ValueError, match="longer than"):
        parse_duration("99999999999d")  # past what a timedelta (or PostgreSQL) holds


def test_byte_sizes_and_the_content_limit() -> None:
    assert parse_byte_size("100mb") == 100 << 20
    assert parse_byte_size("1gb") == 1 << 30 and parse_byte_size("512b") == 512
    assert parse_byte_size("1.5KB") == 1536
    with pytest.raises(ValueError):
        parse_byte_size("lots")
    problem = content_limit_problem(100 << 20, 20 << 20)
    assert problem is not None and "http.max_content_length" in problem
    assert content_limit_problem(None, 1 << 40) is None


def test_cli_refuses_a_bad_schedule_before_starting() -> None:
    result = CliRunner().invoke(main, [*RUN, "--verify-cron", "61 * * * *"])
    assert result.exit_code == 2, result.output
    assert "--verify-cron" in result.output


def test_the_cli_checks_the_schedule_and_the_retention_before_starting() -> None:
    runner = CliRunner()
    res = runner.invoke(main, [*RUN, "--snapshot-cron", "61 * * * *"])
    assert res.exit_code == 2 and "--snapshot-cron" in res.output, res.output
    res = runner.invoke(main, [*RUN, "--snapshot-cron", "0 3 * * *", "--compact-retain", "soon"])
    assert res.exit_code == 2 and "not a duration" in res.output, res.output
    res = runner.invoke(main, [*RUN, "--compact-retain", "7d"])
    assert res.exit_code == 2 and "needs --snapshot-cron" in res.output, res.output
