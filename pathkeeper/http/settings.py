"""Settings of the HTTP service: one frozen object, built by the CLI or by tests.

Each setting is defined once. What the coordinator does with its connections (pool,
lock and idle timeouts, depth limit, group size) is ``coordinator.settings.Settings``,
held whole in ``ServiceSettings.coordinator``, not repeated field by field; the
alias default is the core's (``coordinator.indexing.DEFAULT_ALIAS``, re-exported by
the search contract); what is left here is the service's own: HTTP limits, auth,
idempotency, long-poll caps, the statement timeout of a request.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from coordinator import paths
from coordinator.settings import Settings
from indexer.contract import DEFAULT_ALIAS
from indexer.search_client import SearchSecurity


@dataclass(frozen=True)
class ServiceSettings:
    #: The one database server's URL; with a directory (``directory_url``), unused.
    database_url: str | None
    #: Elasticsearch URL; without it the search endpoint answers 503.
    es_url: str | None = None
    #: How to reach a secured search server (credentials, CA).
    search_security: SearchSecurity = field(default_factory=SearchSecurity)
    index_alias: str = DEFAULT_ALIAS
    #: False only for local development (``--no-auth``): every request is an admin.
    auth: bool = True
    #: How long a validated API key is trusted before it is looked up again (so a
    #: revocation takes effect within this many seconds). 0 disables the cache.
    auth_cache_seconds: float = 5.0
    idempotency_ttl_seconds: float = 24 * 3600.0
    #: Expired idempotency rows are deleted this often (seconds) by the app.
    idempotency_purge_seconds: float = 600.0
    max_body_bytes: int = 8 * 1024 * 1024
    #: A request body (up to ``max_body_bytes``) must arrive whole within this many
    #: seconds of its headers, and an import's streamed body must not pause for longer
    #: between two chunks; else 408 and the connection is closed, so a client that
    #: stops sending cannot hold its slot.
    body_timeout_seconds: float = 30.0
    max_path_bytes: int = paths.MAX_PATH_BYTES
    max_page: int = 1000
    default_page: int = 100
    #: Requests in flight beyond this are refused at once with 429 + Retry-After.
    max_inflight: int = 64
    #: ... and beyond this many of one API key (so one key cannot take them all).
    max_inflight_per_key: int = 16
    #: Long polls (change feed ``wait``, ``/v1/indexed``, search ``min_seq``) have a pool
    #: of their own, so idle waiters never take the slots short requests need.
    max_long_polls: int = 64
    max_long_polls_per_key: int = 8
    #: Requests with no API key to hold (the API docs, a URL outside ``/v1``; under
    #: ``/v1`` such a request is refused 401 before it takes any slot) have a small pool
    #: of their own, counted by client address: they never take a key's slots.
    max_anonymous: int = 16
    max_anonymous_per_address: int = 4
    #: A statement running longer than this is cancelled by PostgreSQL -> 503.
    statement_timeout_seconds: float = 10.0
    #: An import is a bulk load whose COPY lasts as long as its upload: instead of the
    #: statement timeout above, its statements (the COPY included) get this long, and its
    #: upload must have arrived within it; past it -> 503, nothing written. (An upload
    #: that stalls is ended sooner by ``body_timeout_seconds``: 408.)
    import_timeout_seconds: float = 3600.0
    #: Caps of the long polls (change feed ``wait``, search ``min_seq``).
    max_feed_wait_seconds: float = 30.0
    max_index_wait_seconds: float = 10.0
    retry_after_seconds: int = 1
    #: The directory database of a deployment with several database servers
    #: (docs/sharding.md; ``PATHKEEPER_DIRECTORY_URL``): it names the servers, the
    #: server of each namespace, and holds the API keys.
    directory_url: str | None = None
    #: The indexer's checkpoint consumer (for /readyz lag and ``min_seq``); default:
    #: the one writing to ``index_alias``.
    indexer_consumer: str | None = None
    #: The coordinator's settings (pool, lock timeout, depth limit...). A request
    #: waits at most 5 s for a pooled connection (then 503), less than the library's
    #: default: a client retries sooner than a queue of waiters would drain. The pool
    #: keeps every connection it opens, up to the library's 10 + 20 overflow: an
    #: overflow connection is closed whenever the pool's own are all idle and opened
    #: again on the next burst, so a server kept busier than 10 requests at a time
    #: would start new PostgreSQL sessions all the time (one worker, 16 clients: 150-250
    #: in 8 s).
    coordinator: Settings = field(
        default_factory=lambda: Settings(pool_timeout=5.0, pool_size=30, max_overflow=0)
    )

    def with_coordinator(self, **changes: Any) -> ServiceSettings:
        """A copy with ``changes`` to the coordinator's settings."""
        return replace(self, coordinator=replace(self.coordinator, **changes))


#: ``pathkeeper serve --workers N`` hands the settings to its worker processes here.
SETTINGS_ENV = "PATHKEEPER_SERVE_SETTINGS"


def settings_to_json(settings: ServiceSettings) -> str:
    return json.dumps(asdict(settings))


def settings_from_json(value: str) -> ServiceSettings:
    data = json.loads(value)
    return ServiceSettings(**{**data, "coordinator": Settings(**data["coordinator"]),
                              "search_security": SearchSecurity(**data["search_security"])})
