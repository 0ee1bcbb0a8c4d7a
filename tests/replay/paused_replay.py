"""A replay that stops after loading its new index and waits to be killed (for the
kill -9 test): prints ``LOADED <index>`` once the documents are in, then blocks on
stdin. Usage: python paused_replay.py DATABASE_URL ES_URL ALIAS"""

from __future__ import annotations

import sys

from coordinator import Coordinator
from indexer.replay import rebuild
from indexer.search_client import open_search


def main() -> None:
    database_url, es_url, alias = sys.argv[1:4]

    def pause(index: str) -> None:
        print(f"LOADED {index}", flush=True)
        sys.stdin.read()  # until the test kills us

    with Coordinator.connect(database_url) as coord:
        rebuild(coord, open_search(es_url), alias=alias, after_load=pause)


if __name__ == "__main__":
    main()
