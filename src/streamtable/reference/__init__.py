"""Reference implementations to compare streamtable with (internal: tests and benchmarks only)."""
