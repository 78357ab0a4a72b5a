"""Pulsar framing. simple: [total u32][cmdSize u32][BaseCommand];
payload: ... [0x0e01 u16][crc32c u32 over rest][metaSize u32][MessageMetadata][payload].
Bad checksum is flagged (checksum_ok=False), not raised. No I/O here."""
import struct
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError

from . import pulsar_api_pb2 as pb
from .errors import FrameTooLarge, ProtocolError

MAGIC_CRC32C = 0x0E01
DEFAULT_MAX_FRAME_BYTES = 5 * 1024 * 1024 + 64 * 1024


@dataclass
class Frame:
    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes | None = None
    checksum_ok: bool = True
    headers_and_payload: bytes | None = None  # magic..payload exactly as received (what a broker stores)


def encode_command(cmd) -> bytes:
    body = cmd.SerializeToString()
    return struct.pack(">II", 4 + len(body), len(body)) + body


def encode_headers_and_payload(metadata, payload: bytes) -> bytes:
    """The payload section: [magic u16][crc32c u32][metaSize u32][MessageMetadata][payload]."""
    meta = metadata.SerializeToString()
    rest = struct.pack(">I", len(meta)) + meta + payload
    return struct.pack(">HI", MAGIC_CRC32C, crc32c.crc32c(rest)) + rest


def encode_payload_command(cmd, metadata, payload: bytes) -> bytes:
    return encode_message(cmd, encode_headers_and_payload(metadata, payload))


def encode_message(cmd, headers_and_payload: bytes) -> bytes:
    """A command followed by an already-encoded payload section (a broker re-sending a stored entry)."""
    body = cmd.SerializeToString()
    return struct.pack(">II", 4 + len(body) + len(headers_and_payload), len(body)) + body + headers_and_payload


def parse_headers_and_payload(data: bytes) -> tuple[pb.MessageMetadata, bytes, bool]:
    """Split a payload section into (metadata, payload, checksum_ok). Raises ProtocolError."""
    if len(data) < 10:
        raise ProtocolError("truncated payload section")
    magic, crc = struct.unpack_from(">HI", data, 0)
    if magic != MAGIC_CRC32C:
        raise ProtocolError(f"bad magic {magic:#x}")
    body = memoryview(data)[6:]  # a view: only the payload itself is copied out
    (msize,) = struct.unpack_from(">I", body, 0)
    if 4 + msize > len(body):
        raise ProtocolError("metadataSize overruns frame")
    meta = _parse(pb.MessageMetadata(), bytes(body[4:4 + msize]))
    return meta, bytes(body[4 + msize:]), crc32c.crc32c(body) == crc


def _parse(msg, data: bytes):
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise ProtocolError(f"bad {type(msg).__name__}: {e}") from e
    if not msg.IsInitialized():
        raise ProtocolError(f"{type(msg).__name__} missing required fields")
    return msg


class FrameDecoder:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Raises FrameTooLarge (checked before buffering the body) or ProtocolError."""
        self._buf += data
        out = []
        while len(self._buf) >= 4:
            (total,) = struct.unpack_from(">I", self._buf, 0)
            if total > self.max_frame_bytes:
                raise FrameTooLarge(f"frame {total} > {self.max_frame_bytes}")
            if len(self._buf) < 4 + total:
                break
            try:
                out.append(self._decode_from(self._buf, total))
            finally:
                del self._buf[:4 + total]  # a bad frame is consumed too, as before
        return out

    @staticmethod
    def _decode_from(buf: bytearray, total: int) -> Frame:
        """The frame at the start of ``buf``, its payload section copied out once: a 5 MiB SEND was five copies
        (the frame sliced, made bytes, its payload section and body sliced) before it reached the topic."""
        if total < 4:
            raise ProtocolError("frame shorter than command size")
        (csize,) = struct.unpack_from(">I", buf, 4)
        if 4 + csize > total:
            raise ProtocolError("commandSize > totalSize")
        with memoryview(buf) as view:
            cmd = _parse(pb.BaseCommand(), bytes(view[8:8 + csize]))
            if 4 + csize == total:
                return Frame(cmd)
            rest = bytes(view[8 + csize:4 + total])
        meta, payload, ok = parse_headers_and_payload(rest)
        return Frame(cmd, meta, payload, ok, rest)

    @staticmethod
    def _decode(frame: bytes) -> Frame:
        if len(frame) < 4:
            raise ProtocolError("frame shorter than command size")
        (csize,) = struct.unpack_from(">I", frame, 0)
        if 4 + csize > len(frame):
            raise ProtocolError("commandSize > totalSize")
        cmd = _parse(pb.BaseCommand(), frame[4:4 + csize])
        rest = frame[4 + csize:]
        if not rest:
            return Frame(cmd)
        meta, payload, ok = parse_headers_and_payload(rest)
        return Frame(cmd, meta, payload, ok, rest)


_U32 = struct.Struct(">I")


# Batches: a payload of [u32 size][SingleMessageMetadata][payload] per message.
# Compression seam: callers compress pack_batch()'s output / decompress before
# unpack_batch() according to MessageMetadata.compression; this module never does.
def pack_batch(messages) -> bytes:
    """A batch payload from (SingleMessageMetadata, payload) pairs; payload_size is set from each payload."""
    parts = []
    for smm, payload in messages:
        smm.payload_size = len(payload)
        parts += (batch_message_header(smm), payload)
    return b"".join(parts)


def batch_message_header(smm) -> bytes:
    """One message's [u32 size][SingleMessageMetadata] inside a batch; its payload follows."""
    b = smm.SerializeToString()
    return _U32.pack(len(b)) + b


def plain_batch_message_header(payload_size: int, sequence_id: int) -> bytes:
    """``batch_message_header`` of SingleMessageMetadata{payload_size, sequence_id}, written by hand.

    A message without key, properties or event time is the common case of a batching producer; building
    and serializing a protobuf object for it cost more than everything else the producer does per message.
    The bytes are what protobuf writes (fields in number order: 3 then 8, varints); a test holds them equal.
    Raises ValueError for a negative value.
    """
    if payload_size < 0 or sequence_id < 0:
        raise ValueError(f"payload_size and sequence_id must not be negative, got {payload_size}, {sequence_id}")
    size = _varint(payload_size)
    seq = _varint(sequence_id)
    return _HEADER_STARTS[2 + len(size) + len(seq)] + size + b"\x40" + seq


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int (unrolled for the values a producer meets most)."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [bytes((i,)) for i in range(0x80)]
# [u32 size of the SingleMessageMetadata][tag of payload_size], by that size (at most 2 tags + 5 + 10 varint bytes)
_HEADER_STARTS = [_U32.pack(n) + b"\x18" for n in range(18)]


def unpack_batch(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """[(SingleMessageMetadata, payload)] per message. Raises ProtocolError on truncation or a bad SingleMessageMetadata."""
    return list(zip(*split_batch(payload, count)))




def split_batch(payload: bytes, count: int) -> tuple[list[pb.SingleMessageMetadata], list[bytes]]:
    """A batch in one pass, as two parallel lists: the messages' SingleMessageMetadata and their payloads.

    This runs once per received message, so it avoids per-message helper calls (``_parse``) and
    ``IsInitialized()`` (slower than a parse): payload_size is the one required field, and only a 0 can
    mean it is missing. Raises ProtocolError on truncation or a bad SingleMessageMetadata.
    """
    singles, payloads = [], []
    parse = pb.SingleMessageMetadata.FromString
    pos, end = 0, len(payload)
    try:
        for _ in range(count):
            (n,) = _U32.unpack_from(payload, pos)  # struct.error when fewer than 4 bytes are left
            pos += 4
            if pos + n > end:
                raise ProtocolError("truncated batch metadata")
            smm = parse(payload[pos:pos + n])
            pos += n
            size = smm.payload_size
            if size == 0 and not smm.HasField("payload_size"):
                raise ProtocolError("SingleMessageMetadata missing required fields")
            if size < 0 or pos + size > end:
                raise ProtocolError("truncated batch payload")
            singles.append(smm)
            payloads.append(payload[pos:pos + size])
            pos += size
    except struct.error:
        raise ProtocolError("truncated batch") from None
    except (DecodeError, ValueError) as e:
        raise ProtocolError(f"bad SingleMessageMetadata: {e}") from e
    return singles, payloads


def command(type_, **fields) -> pb.BaseCommand:
    """command(T.PING, ping=pb.CommandPing()) -> BaseCommand with type set."""
    return pb.BaseCommand(type=type_, **fields)


# In BaseCommand each command's field number equals its Type value (a protocol fact).
_FIELD_BY_TYPE = {t: f.name for t in pb.BaseCommand.Type.values()
                  if (f := pb.BaseCommand.DESCRIPTOR.fields_by_number.get(t)) is not None}


def field_for_type(type_: int) -> str | None:
    """The BaseCommand field carrying a command of this type (None for types we do not model)."""
    return _FIELD_BY_TYPE.get(type_)
