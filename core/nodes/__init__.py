"""This node's membership in a cluster of nodes over PostgreSQL metadata: its lease and sync
tasks (`membership.py`) and the topic sync that makes its open streams agree with the shared
database (`topic_sync.py`). They drive the store and write `core/cluster/`'s view and fence.
Moving a segment between nodes is the stream's side of a scale event
(`core/stream/handover.py`)."""
