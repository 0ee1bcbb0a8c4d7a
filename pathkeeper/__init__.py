"""Pathkeeper: transactional trees in PostgreSQL, replicated in order into a search engine.

The packages: ``coordinator`` (the core), ``indexer`` (replication and rebuilds) and this
one, the entry points (``pathkeeper.cli``, ``pathkeeper.http``, ``pathkeeper.client``).
"""
