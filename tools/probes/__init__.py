"""Probes: one question each, run from the repository root as `python -m tools.probes.NAME`
(produce_latency, request_cost, fsync_beside_chunks). See docs/performance.md."""
