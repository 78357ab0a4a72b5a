"""The frames of the served metadata store (``unix://``): a pure codec, no sockets.

A frame is a 4-byte big-endian length and a msgpack array. The client sends
``[request_id, op, *args]``; the server answers ``[request_id, 0, result]`` or
``[request_id, code, message]`` with a ``storage.errors`` status code, and
pushes ``[0, "event", watch_id, event_type, path]`` (a watch fired) and
``[0, "session", state, session_id]`` (the session's state changed; the first
frame of every connection is ``CONNECTED``). Request ids start at 1, so id 0
marks a pushed frame.
"""

from __future__ import annotations

import struct

import msgpack

from storage.errors import BadArgumentsError, MetadataError, StorageError, for_code
from storage.metadata.api import Stat

MAX_FRAME_BYTES = 8 * 1024 * 1024  # ZooKeeper's jute.maxbuffer is 1 MiB; managed-ledger nodes stay far below either
_LENGTH = struct.Struct(">I")

OPS = frozenset({"get", "exists", "create", "set", "delete", "children", "watch", "unwatch", "expire", "close"})
WATCH_KINDS = frozenset({"data", "children"})


def encode(message: list) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise BadArgumentsError(f"metadata frame of {len(body)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return _LENGTH.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder for one direction of one connection. ``feed`` raises MetadataError on a bad frame
    (too large, not msgpack, not an array starting with an integer id); the connection is then unusable."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[list]:
        self._buf += data
        frames = []
        while len(self._buf) >= 4:
            (size,) = _LENGTH.unpack_from(self._buf)
            if size > self._max:
                raise MetadataError(f"metadata frame of {size} bytes exceeds the {self._max}-byte limit")
            if len(self._buf) < 4 + size:
                break
            raw = bytes(self._buf[4:4 + size])
            del self._buf[:4 + size]
            try:
                frame = msgpack.unpackb(raw, raw=False)
            except Exception as exc:  # msgpack raises several unrelated types for garbage
                raise MetadataError(f"metadata frame is not valid msgpack: {exc}") from exc
            if not isinstance(frame, list) or len(frame) < 2 or not isinstance(frame[0], int):
                raise MetadataError("metadata frame must be an array starting [request_id, ...]")
            frames.append(frame)
        return frames


def stat_fields(stat: Stat) -> list[int]:
    return [stat.version, stat.created_ms, stat.modified_ms, stat.ephemeral_owner, stat.num_children]


def stat_from(fields) -> Stat:
    return Stat(*fields)


def error_frame(request_id: int, exc: StorageError) -> list:
    """A metadata error by its wire code; one without a code of its own (MetadataError itself) travels as -1."""
    return [request_id, exc.code if exc.code > 0 else -1, str(exc)]


def error_from(code: int, message: str) -> StorageError:
    err = for_code(code, message) if code > 0 else MetadataError(message)
    return err if isinstance(err, MetadataError) else MetadataError(f"status {code}: {message}")
