"""The chunk map from the metadata store itself (option `metadata`: the gateway's SQLite
file, `DATA/metadata.db`), for reads planned while the gateway is down.

Opened read-only, queried directly: nothing is migrated or written. Only what tier 2 holds
is known here, so such a read ends where tier 2 ends (the tail in tier 1 needs the
gateway), and its last stable offset is the first offset of a transaction saved open.
Tier 2 is where the options say, else the folder `tier2` beside the file (the embedded
default).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

from .chunkmap import PartitionMap, SliceRef, TopicMap
from .errors import StreamgateSourceError


def _connect(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise StreamgateSourceError(f"option 'metadata': no metadata file {path!r}")
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise StreamgateSourceError(f"option 'metadata': cannot open {path!r}: {exc}") from None


def list_topics_from(path: str) -> list[str]:
    with closing(_connect(path)) as db:
        return [row[0] for row in db.execute("SELECT name FROM topics ORDER BY name")]


def chunk_map_from(path: str, topic: str) -> TopicMap:
    """The topic's tier-2 chunk map as the metadata store records it."""
    try:
        with closing(_connect(path)) as db:
            found = db.execute("SELECT partitions FROM topics WHERE name = ?", (topic,)).fetchone()
            if found is None:
                raise StreamgateSourceError(f"topic {topic!r} does not exist in {path!r}")
            slices = db.execute(
                "SELECT s.partition, c.object_key, s.first_offset, s.last_offset, "
                "s.byte_start, s.byte_length, s.max_timestamp FROM chunk_slices s "
                "JOIN chunks c ON c.chunk_id = s.chunk_id WHERE c.topic = ? "
                "ORDER BY s.partition, s.first_offset",
                (topic,),
            ).fetchall()
            starts = dict(
                db.execute(
                    "SELECT partition, log_start_offset FROM log_starts WHERE topic = ?",
                    (topic,),
                ).fetchall()
            )
            aborted = db.execute(
                "SELECT partition, producer_id, first_offset, last_offset FROM aborted_txns "
                "WHERE topic = ? ORDER BY last_offset",
                (topic,),
            ).fetchall()
            open_txns = db.execute(
                "SELECT partition, first_offset FROM open_txns WHERE topic = ? "
                "AND producer_id >= 0",
                (topic,),
            ).fetchall()
    except sqlite3.Error as exc:
        raise StreamgateSourceError(f"option 'metadata': reading {path!r}: {exc}") from None
    partitions = []
    for index in range(int(found[0])):
        refs = tuple(SliceRef(*row[1:]) for row in slices if row[0] == index)
        log_start = int(starts.get(index, 0))
        end = max([log_start, *(r.last + 1 for r in refs)])
        unstable = [first for p, first in open_txns if p == index and first < end]
        partitions.append(
            PartitionMap(
                partition=index,
                log_start=log_start,
                high_watermark=end,
                last_stable_offset=min([end, *unstable]),
                tier2_end=end,
                slices=refs,
                aborted=tuple((pid, first, last) for p, pid, first, last in aborted if p == index),
            )
        )
    root = os.path.join(os.path.dirname(os.path.abspath(path)), "tier2")
    return TopicMap(topic, {"kind": "folder", "root": root}, tuple(partitions))
