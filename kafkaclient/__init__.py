"""A small blocking Kafka protocol client (the command line tools use it)."""
