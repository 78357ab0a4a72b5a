"""Payload compression round trips and reports corrupt input as a specific error (pure)."""

import pytest

from magnetar.compression import CompressionError, CompressionType, compress, decompress


@pytest.mark.parametrize("kind", list(CompressionType))
def test_round_trip(kind):
    data = b"a fairly compressible payload " * 50
    packed = compress(kind, data)
    assert decompress(kind, packed, len(data)) == data
    if kind is not CompressionType.NONE:
        assert len(packed) < len(data)


@pytest.mark.parametrize("kind", [k for k in CompressionType if k is not CompressionType.NONE])
def test_corrupt_or_mis_sized_input_raises_compression_error(kind):
    data = b"payload " * 64
    with pytest.raises(CompressionError):
        decompress(kind, b"\xff\x00garbage" * 3, len(data))
    with pytest.raises(CompressionError, match="metadata says"):
        decompress(kind, compress(kind, data), len(data) + 1)
