"""The metadata layer: topics (streams), their segments, tier-2 chunks, committed
offsets, transactions, ACLs, quotas, broker configs and SCRAM credentials.

One interface (`MetadataStore`, records in records.py), its queries written once
(shared.py, credentials.py) over a small dialect (dialect.py), numbered migrations both
engines apply at open (schema.py), and two engines: SQLite, embedded in the data folder
(sqlite.py, imported here), and PostgreSQL for nodes sharing a database (postgres.py,
imported where asked for, so psycopg stays optional).
"""

from .credentials import CredentialStore, SqlCredentialStore
from .interface import MetadataStore
from .records import (
    AbortedTxn,
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    CredentialInfo,
    CredentialKey,
    NodeRecord,
    OpenSegment,
    OpenTxn,
    OpenTxnSnapshot,
    OwnedSegment,
    PendingTxnOffset,
    ProducerSnapshot,
    ScramCredential,
    SegmentOwner,
    SegmentRecord,
    TopicExistsError,
    TopicHead,
    TopicRecord,
    TxnMarker,
    TxnPartition,
    TxnRecord,
    UserCredential,
    WalFenced,
    WalRange,
)
from .schema import SCHEMA_VERSION
from .shared import SqlMetadataStore
from .sqlite import SQLiteCredentialStore, SQLiteMetadataStore

__all__ = [
    "SCHEMA_VERSION",
    "AbortedTxn",
    "ChunkRecord",
    "ChunkSlice",
    "CommittedOffset",
    "CredentialInfo",
    "CredentialKey",
    "CredentialStore",
    "MetadataStore",
    "NodeRecord",
    "OpenSegment",
    "OpenTxn",
    "OpenTxnSnapshot",
    "OwnedSegment",
    "ProducerSnapshot",
    "SQLiteCredentialStore",
    "SQLiteMetadataStore",
    "ScramCredential",
    "SegmentOwner",
    "SegmentRecord",
    "SqlCredentialStore",
    "SqlMetadataStore",
    "TopicExistsError",
    "TopicHead",
    "TopicRecord",
    "PendingTxnOffset",
    "TxnMarker",
    "TxnPartition",
    "TxnRecord",
    "WalFenced",
    "WalRange",
    "UserCredential",
]
