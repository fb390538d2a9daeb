"""The cluster as this node sees it: the live nodes, each open segment's owner, and the
partitions this node leads (`view.py`), and the fence deadline that bounds every append
(`fencing.py`). Process-wide state that the stream, the store, tiering and the gateway read;
this node's membership tasks, which write it, are `core/nodes/` (one layer above the store).
"""
