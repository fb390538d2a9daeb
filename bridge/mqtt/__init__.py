"""MQTT <-> streamgate bridge: MQTT messages become records of streamgate topics."""
