"""Benchmarks and compatibility checks that run real Kafka clients against streamgate."""
