"""Start and stop the servers that tests and benchmarks run against.

One home for every external process a test or a benchmark needs, each on a free loopback
port with its own log file: the streamgate gateway (`gateway`), Apache Kafka from a Kafka
distribution (`kafka`), Kafka Connect and MirrorMaker 2 from the same distribution
(`connect`), a moto S3 server (`moto`), PostgreSQL (`postgres`), and a TCP proxy
that simulates an outage of a server (`proxy`). `process` is their common life cycle,
`procstats` reads CPU and memory from /proc, and `provenance` is what every result file
records (commit, dirty tree, command, machine).
"""
