"""Start and stop the servers that tests and benchmarks run against.

One home for every external process a test or a benchmark needs: the streamgate gateway
(`gateway`), Apache Kafka from a Kafka distribution (`kafka`), and the provenance every
result file records (`provenance`). Each runs on a free loopback port with its own log file.
"""
