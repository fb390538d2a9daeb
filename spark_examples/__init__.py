"""PySpark jobs that run on streamgate through Spark's own Kafka connector."""
