"""magnetar.streams: the Stream API client (log streams in namespaces, one fenced writer, tailing readers) over gRPC.

``StreamClient`` is asyncio; ``magnetar.streams.sync.StreamClient`` is the same API for threads.
"""

from magnetar.streams.client import EARLIEST, LATEST, Position, Record, StreamClient, StreamInfo
from magnetar.streams.errors import (
    InvalidPosition, InvalidStreamRequest, NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, NotOwner,
    PlacementUnsatisfiable, PositionTruncated, StreamAuthenticationError, StreamAuthorizationError, StreamError, StreamExists, StreamNotFound, StreamUnavailable, TooManyRequests, WriterFenced,
)
from magnetar.streams.reader import StreamReader
from magnetar.streams.writer import StreamWriter

__all__ = [
    "EARLIEST", "LATEST", "InvalidPosition", "InvalidStreamRequest", "NamespaceExists", "NamespaceNotEmpty",
    "NamespaceNotFound", "NotOwner", "PlacementUnsatisfiable", "Position", "PositionTruncated", "Record", "StreamAuthenticationError", "StreamAuthorizationError", "StreamClient", "StreamError",
    "StreamExists", "StreamInfo", "StreamNotFound", "StreamReader", "StreamUnavailable", "StreamWriter",
    "TooManyRequests", "WriterFenced",
]
