"""How many bulk requests a subtree pass may keep in flight: two while the node lane is
quiet, one while it sends requests of its own (one of the search server's two write
threads then stays free for the node lane's next small request)."""

from __future__ import annotations

import time

from indexer.bulk import IN_FLIGHT
from indexer.subtree_lane import NodeLanePriority


def test_two_in_flight_only_while_the_node_lane_is_quiet() -> None:
    priority = NodeLanePriority(quiet=0.05)
    assert priority.subtree_requests() == IN_FLIGHT == 2  # nothing sent yet
    priority.busy()
    assert priority.subtree_requests() == 1  # a node-lane request in flight
    priority.idle()
    assert priority.subtree_requests() == 1  # answered, but the lane may send again soon
    assert priority.subtree_requests(since=time.monotonic()) == 2  # sent before the pass
    time.sleep(0.1)
    assert priority.subtree_requests() == 2
