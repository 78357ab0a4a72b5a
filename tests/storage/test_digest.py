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


@pytest.mark.parametrize("flip, ledger_id, entry_id, match", [
    (None, 5, 6, None),
    (0, 5, 6, "digest mismatch"),        # a header byte
    (40, 5, 6, "digest mismatch"),       # a payload byte
    (None, 5, 7, "expected ledger 5 entry 7"),
    (None, 4, 6, "expected ledger 4 entry 6"),
])
def test_verify_header_checks_as_verify_does_without_the_payload(flip, ledger_id, entry_id, match):
    body = bytearray(digest.package(5, 6, 4, 100, b"hello"))
    if flip is not None:
        body[flip] ^= 0x01
    if match is None:
        assert digest.verify_header(bytes(body), ledger_id, entry_id) == (4, 100)
    else:
        with pytest.raises(DigestMismatchError, match=match):
            digest.verify_header(bytes(body), ledger_id, entry_id)
    with pytest.raises(DigestMismatchError, match="shorter than"):
        digest.verify_header(b"\x00" * 10, 5, 6)
