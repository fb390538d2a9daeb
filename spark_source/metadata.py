"""The chunk map from the metadata store itself (option `metadata`: the gateway's SQLite
file, `DATA/metadata.db`, or the `postgresql://` URL that gateway nodes share), for reads
planned while the gateway is down.

Opened read-only (a read-only SQLite URI; a PostgreSQL session whose transactions are
read-only), queried directly: nothing is migrated or written. Only what tier 2 holds
is known here, so such a read ends where tier 2 ends (the tail in tier 1 needs the
gateway), and its last stable offset is the first offset of a transaction saved open.
Tier 2 is where the options say, else the folder `tier2` beside the SQLite file (the
embedded default); with PostgreSQL the options must say (options.py checks).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from typing import Any

from .chunkmap import PartitionMap, SliceRef, TopicMap
from .errors import StreamgateSourceError


def is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def _where(target: str) -> str:
    """The target for messages, without a password."""
    if not is_postgres(target):
        return repr(target)
    scheme, _, rest = target.partition("://")
    return repr(f"{scheme}://{rest.rpartition('@')[2]}")


class _Postgres:
    """The shared database, read-only, with the SQLite queries' `?` placeholders."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise StreamgateSourceError(
                "option 'metadata': a postgresql:// URL needs psycopg (pip install "
                "'streamgate[nodes]')"
            ) from None
        try:
            self.conn = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=10,
                options="-c default_transaction_read_only=on",
            )
        except psycopg.Error as exc:
            raise StreamgateSourceError(
                f"option 'metadata': cannot connect to {_where(url)}: {exc}"
            ) from None

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]

    def close(self) -> None:
        self.conn.close()


def _db_errors() -> tuple[type[Exception], ...]:
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    try:
        import psycopg

        errors += (psycopg.Error,)
    except ImportError:
        pass
    return errors


def _connect(path: str) -> Any:
    if is_postgres(path):
        return _Postgres(path)
    if not os.path.isfile(path):
        raise StreamgateSourceError(f"option 'metadata': no metadata file {path!r}")
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise StreamgateSourceError(f"option 'metadata': cannot open {path!r}: {exc}") from None


def list_topics_from(path: str) -> list[str]:
    try:
        with closing(_connect(path)) as db:
            return [row[0] for row in db.execute("SELECT name FROM topics ORDER BY name")]
    except _db_errors() as exc:
        raise StreamgateSourceError(f"option 'metadata': reading {_where(path)}: {exc}") from None


def chunk_map_from(path: str, topic: str) -> TopicMap:
    """The topic's tier-2 chunk map as the metadata store records it."""
    try:
        with closing(_connect(path)) as db:
            found = db.execute("SELECT partitions FROM topics WHERE name = ?", (topic,)).fetchone()
            if found is None:
                raise StreamgateSourceError(f"topic {topic!r} does not exist in {_where(path)}")
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
    except _db_errors() as exc:
        raise StreamgateSourceError(f"option 'metadata': reading {_where(path)}: {exc}") from None
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
    if is_postgres(path):  # where tier 2 is comes from the options
        return TopicMap(topic, {"kind": None}, tuple(partitions))
    root = os.path.join(os.path.dirname(os.path.abspath(path)), "tier2")
    return TopicMap(topic, {"kind": "folder", "root": root}, tuple(partitions))
