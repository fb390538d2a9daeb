"""Topic and broker configs and the rules they put on produced data: every Kafka topic
config with its type, default and value check (`topic_defs.py`); validating, altering and
describing a topic's configs (`topic.py`); the dynamic broker configs (`broker.py`); the
topic configs applied on produce: recompression, LogAppendTime, keys on compacted topics
(`produce_rules.py`)."""
