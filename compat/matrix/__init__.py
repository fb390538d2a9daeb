"""A feature matrix of real Kafka clients against one or two Kafka-protocol endpoints."""
