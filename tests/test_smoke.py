from __future__ import annotations

from coordinator import Coordinator


def test_basic_flow(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/clinton")
    coord.mkdir(ns, "/clinton/projects/elasticsearch", parents=True)
    r = coord.create_file(ns, "/clinton/projects/elasticsearch/README.txt", "hello")
    assert r.seq is not None
    assert r.node.path == "/clinton/projects/elasticsearch/README.txt"
    coord.rename(ns, "/clinton", "bill")
    n = coord.get(ns, r.node.id)
    assert n.path == "/bill/projects/elasticsearch/README.txt"
    assert n.content == "hello"
    coord.move(ns, n.id, "/bill/README.md")
    assert [x.name for x in coord.listdir(ns, "/bill")] == ["README.md", "projects"]
    paths = [x.path for x in coord.walk(ns)]
    assert paths == ["/", "/bill", "/bill/README.md", "/bill/projects",
                     "/bill/projects/elasticsearch"]
    coord.delete(ns, "/bill", recursive=True)
    assert [x.path for x in coord.walk(ns)] == ["/"]
    events, cursor = coord.read_events()
    assert [e.type for e in events] == ["namespace_created", "created", "created", "created",
                                        "created", "moved", "moved", "deleted"]
    assert cursor >= events[-1].position
