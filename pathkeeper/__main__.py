"""``python -m pathkeeper`` is the ``pathkeeper`` command."""

import os

from pathkeeper.cli.main import main

# A worker run as a child process (tests, benchmarks) writes its log lines at once.
os.environ.setdefault("PYTHONUNBUFFERED", "1")
main(prog_name="pathkeeper")
