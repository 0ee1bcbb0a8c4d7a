"""Throwaway PostgreSQL and Elasticsearch servers on loopback, for the demo, the tests and
the benchmarks: fetched, started and stopped by the project itself."""
