"""The write-ahead log in object storage (`streamgate serve --wal object`).

With it, an append is acknowledged only once its bytes are in an object of the tier-2
store and that object is recorded in the metadata store, so a node's disk holds nothing
that is not also elsewhere: a node that loses its disk recovers its segments' tails from
the objects (restore.py), and, with several nodes, the metadata commit is where a node
that lost its segments is fenced (WalFenced); live nodes take over a dead node's segments
(core/nodes/takeover.py).

- layout.py: what one write-ahead object holds;
- writer.py: gathers the appends of every segment of the node into one object per flush,
  writes it, records it, then reports the appends durable; deletes the objects whose
  ranges reached tier-2 chunks (the ordinary uploads fold them in);
- restore.py: before the segments open, writes the tails the objects hold and the local
  disk lacks back into local log files, which then replay as after any restart.

The local log is still written (and read from): it is the node's cache of its segments
and what the uploader cuts chunks from.
"""
