"""The one exception the streamgate Spark source raises for anything it cannot do."""

from __future__ import annotations


class StreamgateSourceError(Exception):
    """A wrong or missing option, an unreachable gateway or object store, a missing chunk:
    the message names the option or the object."""


class UnreachableError(StreamgateSourceError):
    """The gateway's admin listener did not answer at all (refused, timed out): a stream
    waits `timeoutMs` for it to come back (a restart) before giving up."""
