import pytest

from storage import digest
from storage.errors import DigestMismatchError


def test_package_layout_and_round_trip():
    body = digest.package(5, 6, 4, 100, b"hello")
    assert len(body) == digest.HEADER_SIZE + 5
    assert body[:32] == (5).to_bytes(8, "big") + (6).to_bytes(8, "big") + (4).to_bytes(8, "big") + (100).to_bytes(8, "big")
    assert digest.verify(body, 5, 6) == digest.Entry(5, 6, 4, 100, b"hello")


@pytest.mark.parametrize("position", [0, 9, 20, 31, 33, 36, 40])
def test_any_flipped_byte_is_detected(position):
    body = bytearray(digest.package(5, 6, -1, 5, b"hello"))
    body[position] ^= 0x01
    with pytest.raises(DigestMismatchError):
        digest.unpack(bytes(body))


def test_entry_for_another_id_is_rejected():
    body = digest.package(5, 6, -1, 5, b"hello")
    with pytest.raises(DigestMismatchError, match="expected ledger 5 entry 7"):
        digest.verify(body, 5, 7)


def test_short_body_is_rejected():
    with pytest.raises(DigestMismatchError, match="shorter than"):
        digest.unpack(b"\x00" * 10)
