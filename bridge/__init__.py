"""Edge bridges between other protocols and streamgate (MQTT today)."""
