"""``python -m indexer run ...``: the same as ``pathkeeper indexer run ...``."""

import os
import sys

from coordinator.cli import main

os.environ.setdefault("PYTHONUNBUFFERED", "1")
main(args=["indexer", *sys.argv[1:]], prog_name="python -m indexer")
