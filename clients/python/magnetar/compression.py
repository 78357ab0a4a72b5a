"""Payload compression as Pulsar does it: the message payload (or a whole batch) is compressed, and
``MessageMetadata.compression`` + ``uncompressed_size`` say how to undo it. Pure functions, no I/O.

LZ4 is a raw LZ4 block (no frame), ZLIB a zlib stream, ZSTD a zstd frame, SNAPPY a raw snappy block,
as the official clients write them.
"""

from __future__ import annotations

import enum
import zlib

import cramjam
import lz4.block
import zstandard

from magnetar.errors import MagnetarError


class CompressionType(enum.IntEnum):
    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class CompressionError(MagnetarError):
    """A payload could not be decompressed (or the codec is not available)."""


def compress(kind: int, data: bytes) -> bytes:
    kind = CompressionType(kind)
    if kind is CompressionType.NONE:
        return data
    if kind is CompressionType.LZ4:
        return lz4.block.compress(data, store_size=False)
    if kind is CompressionType.ZLIB:
        return zlib.compress(data)
    if kind is CompressionType.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    return bytes(cramjam.snappy.compress_raw(data))


def decompress(kind: int, data: bytes, uncompressed_size: int) -> bytes:
    """Raises CompressionError naming the codec when the bytes do not decompress to ``uncompressed_size``."""
    try:
        kind = CompressionType(kind)
        if kind is CompressionType.NONE:
            return data
        if kind is CompressionType.LZ4:
            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif kind is CompressionType.ZLIB:
            out = zlib.decompress(data)
        elif kind is CompressionType.ZSTD:
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=max(uncompressed_size, 1))
        else:
            out = bytes(cramjam.snappy.decompress_raw(data))
    except (lz4.block.LZ4BlockError, zlib.error, zstandard.ZstdError, cramjam.DecompressionError, ValueError) as exc:
        raise CompressionError(f"cannot decompress a {kind} payload: {exc}") from exc
    if len(out) != uncompressed_size:
        raise CompressionError(f"{kind.name} payload decompressed to {len(out)} bytes, metadata says {uncompressed_size}")
    return out
