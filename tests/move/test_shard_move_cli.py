"""``pathkeeper shard move``: progress lines, bad input as one ``error:`` line (exit 2),
and a mover process killed with SIGKILL at each step, then ``--resume``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from coordinator.commands import WriteFile
from coordinator.namespace_move import STEPS, MoveRefused, NamespaceMover
from pathkeeper.cli.main import main
from pathkeeper.cli.shard_move import DIRECTORY_URL_ENV, STOP_AFTER_ENV
from tests.move.conftest import TwoShards, Writer, unique_ns
from tests.move.test_namespace_move import replication_left, rows

ROOT = Path(__file__).resolve().parents[2]


def _cli(shards: TwoShards, *args: str, stop_after: str | None = None
         ) -> subprocess.Popen[str]:
    env = {**os.environ, DIRECTORY_URL_ENV: shards.directory_url,
           "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop(STOP_AFTER_ENV, None)
    if stop_after:
        env[STOP_AFTER_ENV] = stop_after
    return subprocess.Popen([sys.executable, "-m", "pathkeeper", "shard", "move", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("step", STEPS[:-1])
def test_a_mover_killed_after_each_step_is_finished_by_resume(
        shards: TwoShards, step: str) -> None:
    ns = unique_ns()
    shards.create(ns)
    writer = Writer(shards, ns, "w")
    writer.start()
    mover = _cli(shards, ns, "b", stop_after=step)
    try:
        assert mover.stdout is not None
        seen = []
        for line in mover.stdout:
            seen.append(line)
            if "waiting to be killed" in line:
                break
        assert any(f"{step}: done in" in line for line in seen), seen
        # While it runs (here: waits), no second mover runs the move.
        with pytest.raises(MoveRefused, match="another mover"):
            NamespaceMover(shards.directory_url).resume(ns)
    finally:
        os.kill(mover.pid, signal.SIGKILL)
        mover.communicate(timeout=30)
    assert mover.returncode == -signal.SIGKILL
    recorded = shards.directory("SELECT step FROM moves WHERE namespace = %s", (ns,))
    assert recorded == [("cleanup" if step == "flip" else step,)]
    done = _cli(shards, "--resume", ns)
    out, err = done.communicate(timeout=300)
    writer.finish()
    assert done.returncode == 0, err
    assert f"moved {ns} from a to b" in out
    assert shards.placed(ns) == "b"
    assert shards.directory("SELECT * FROM moves") == []
    assert all(not r for r in rows(shards, "a", ns).values())
    assert replication_left(shards) == {"subscriptions": [], "slots": [], "publications": []}
    target = shards.coord("b")
    for ack in writer.acks:
        assert target.stat(ns, ack.path).version >= ack.version
    assert target.execute(ns, WriteFile("/w/f0", "after")).seq is not None


def test_bad_input_is_one_error_line(shards: TwoShards) -> None:
    ns = unique_ns()
    shards.create(ns)
    env = {DIRECTORY_URL_ENV: shards.directory_url}
    for args, says in (
        (["shard", "move", ns], "missing argument TARGET"),
        (["shard", "move", "--resume", "--abort", ns], "exclude each other"),
        (["shard", "move", "--resume", ns, "b"], "NAMESPACE alone"),
        (["shard", "move", ns, "nowhere"], "no shard nowhere"),
        (["shard", "move", "--resume", ns], "no move of namespace"),
        (["shard", "move", "--abort", ns], "no move of namespace"),
        (["shard", "move", "--directory-url", "postgresql://x@127.0.0.1:1/d", ns, "b"],
         "cannot reach the directory"),
    ):
        out = CliRunner().invoke(main, args, env=env)
        assert out.exit_code == 2, (args, out.output)
        lines = out.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], (
            args, out.output)
    assert shards.directory("SELECT * FROM moves") == []
    assert replication_left(shards) == {"subscriptions": [], "slots": [], "publications": []}


def test_progress_lines_name_each_step_with_its_time(shards: TwoShards) -> None:
    ns = unique_ns()
    shards.create(ns)
    out = CliRunner().invoke(main, ["shard", "move", ns, "b"],
                             env={DIRECTORY_URL_ENV: shards.directory_url})
    assert out.exit_code == 0, out.output
    for step in STEPS:
        assert f" {step}: done in " in out.output
    assert "freeze (frozen to flip): " in out.output
