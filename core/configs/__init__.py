"""Topic and broker configs and the rules they put on produced data: every Kafka topic
config with its type, default and validation, describe and alter (`topic.py`); the dynamic
broker configs (`broker.py`); the topic configs applied on produce: recompression,
LogAppendTime, keys on compacted topics (`produce_rules.py`)."""
