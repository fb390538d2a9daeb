"""What the benchmarks in compat/ share: records and their checks, produce and consume runs,
tier-2 measurement, progress display, option types, topics and result files. Processes
(gateway, moto, Kafka) are started through `harness/`."""
