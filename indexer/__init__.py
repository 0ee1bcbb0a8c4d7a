"""Pathkeeper's indexer: replicates the event log into Elasticsearch."""
