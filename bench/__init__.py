"""Benchmarks: `python -m bench.NAME`, each printing one JSON object as its last line."""
