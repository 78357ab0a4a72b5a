"""The bookie wire protocol: a pure codec, no sockets (STYLE.md 1).

Frames are a 4-byte big-endian length followed by that many bytes of one
msgpack array. Requests carry a client-chosen request id (``rid``); the
bookie answers each request with exactly one response carrying the same rid,
possibly out of order, so a client pipelines freely (BookKeeper v2/v3 shape).

    request                                          response
    [ADD, rid, ledger, entry, flags, key, body]      [ADD, rid, status, ledger, entry]
    [READ, rid, ledger, entry, flags, key]           [READ, rid, status, ledger, entry, body|nil]
    [READ_LAC, rid, ledger]                          [READ_LAC, rid, status, ledger, lac]
    [BATCH_READ, rid, ledger, first, last, max_b]    [BATCH_READ, rid, status, ledger, [body, ...]]
    (malformed input)                                [ERROR, rid|-1, status, message]  then close

``body`` is a packaged entry (storage.digest). ``key`` is the ledger's master
key (password digest). ADD flag ``RECOVERY`` marks a recovery add, accepted on
a fenced ledger. READ flag ``FENCE`` fences the ledger before reading and
answers only once the fence is durable -- and with it every add queued
before the fence -- so a fencing read never says "no such entry" about an
add the bookie may still acknowledge; ledger recovery sends all its reads
with it. READ of entry ``LAST_ENTRY`` (-1) returns the highest entry the
bookie holds, which is how recovery learns each bookie's tail. ``status`` 0 is OK; any other value is
a ``storage.errors`` code.

``FrameDecoder.feed(data)`` returns the complete messages in ``data`` and
raises ``FrameTooLargeError`` / ``MalformedRequestError`` (with ``.rid`` set
when the frame was readable enough to have one) on bad input; after an error
the stream is unusable and the connection should be closed.

Field bounds: a well-formed request can still carry values no honest client
sends. ``bounded(request, limits)`` is the one check of every field a client
controls, run by the server before anything else: a value that cannot be
right (a negative ledger id, a flag bit the op does not have, a master key
longer than any digest, a reversed range) raises
``BadRequestError``, answered on that request alone (BookKeeper's EBADREQ;
the connection stays). A quantity that is merely larger than the bookie will
serve is capped, as BookKeeper caps a batch read's size at
``maxBatchReadSize``: a BATCH_READ's ``max_bytes`` and its entry count are
cut to the limits and the reply is the shorter batch the protocol already
allows for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import msgpack

from storage.errors import BadRequestError, FrameTooLargeError, MalformedRequestError

OK = 0

ERROR = 0
ADD = 1
READ = 2
READ_LAC = 3
BATCH_READ = 4

FLAG_RECOVERY = 1
FLAG_FENCE = 1
LAST_ENTRY = -1

DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024

# Ledger and entry ids are BookKeeper's non-negative Java longs; request ids are echoed, so they share the range.
MAX_ID = 2**63 - 1
ADD_FLAGS = FLAG_RECOVERY
READ_FLAGS = FLAG_FENCE
# A master key is a digest of the ledger password (SHA-256 here, SHA-1 in BookKeeper): 64 bytes is room for any.
MAX_MASTER_KEY_BYTES = 64
DEFAULT_MAX_BATCH_READ_BYTES = 5 * 1024 * 1024  # BookKeeper's maxBatchReadSize default
DEFAULT_MAX_BATCH_READ_ENTRIES = 1024

_LEN = struct.Struct(">I")


# ---- messages ------------------------------------------------------------


@dataclass(slots=True)
class AddRequest:
    rid: int
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes
    body: bytes

    @property
    def recovery(self) -> bool:
        return bool(self.flags & FLAG_RECOVERY)

    def fields(self):
        return (ADD, self.rid, self.ledger_id, self.entry_id, self.flags, self.master_key, self.body)


@dataclass(slots=True)
class ReadRequest:
    rid: int
    ledger_id: int
    entry_id: int
    flags: int = 0
    master_key: bytes = b""

    @property
    def fence(self) -> bool:
        return bool(self.flags & FLAG_FENCE)

    def fields(self):
        return (READ, self.rid, self.ledger_id, self.entry_id, self.flags, self.master_key)


@dataclass(slots=True)
class ReadLacRequest:
    rid: int
    ledger_id: int

    def fields(self):
        return (READ_LAC, self.rid, self.ledger_id)


@dataclass(slots=True)
class BatchReadRequest:
    rid: int
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    max_bytes: int

    def fields(self):
        return (BATCH_READ, self.rid, self.ledger_id, self.first_entry_id, self.last_entry_id, self.max_bytes)


@dataclass(slots=True)
class AddResponse:
    rid: int
    status: int
    ledger_id: int
    entry_id: int

    def fields(self):
        return (ADD, self.rid, self.status, self.ledger_id, self.entry_id)


@dataclass(slots=True)
class ReadResponse:
    rid: int
    status: int
    ledger_id: int
    entry_id: int
    body: bytes | None

    def fields(self):
        return (READ, self.rid, self.status, self.ledger_id, self.entry_id, self.body)


@dataclass(slots=True)
class ReadLacResponse:
    rid: int
    status: int
    ledger_id: int
    lac: int

    def fields(self):
        return (READ_LAC, self.rid, self.status, self.ledger_id, self.lac)


@dataclass(slots=True)
class BatchReadResponse:
    rid: int
    status: int
    ledger_id: int
    bodies: list[bytes]

    def fields(self):
        return (BATCH_READ, self.rid, self.status, self.ledger_id, self.bodies)


@dataclass(slots=True)
class ErrorResponse:
    rid: int
    status: int
    message: str

    def fields(self):
        return (ERROR, self.rid, self.status, self.message)


Request = AddRequest | ReadRequest | ReadLacRequest | BatchReadRequest
Response = AddResponse | ReadResponse | ReadLacResponse | BatchReadResponse | ErrorResponse


# ---- field bounds ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_batch_read_bytes: int = DEFAULT_MAX_BATCH_READ_BYTES
    max_batch_read_entries: int = DEFAULT_MAX_BATCH_READ_ENTRIES


_NAMES = {AddRequest: "ADD", ReadRequest: "READ", ReadLacRequest: "READ_LAC", BatchReadRequest: "BATCH_READ"}


def _bad(request: Request, what: str) -> BadRequestError:
    return BadRequestError(f"{_NAMES[type(request)]} {what}")


def _id(request: Request, name: str, value: int, low: int = 0) -> None:
    if not low <= value <= MAX_ID:
        raise _bad(request, f"{name} {value} is outside {low}..{MAX_ID}")


def _key(request: Request, key: bytes) -> None:
    # Only the length: a missing or wrong key of a possible length is the bookie's Unauthorized, not a bad request.
    if len(key) > MAX_MASTER_KEY_BYTES:
        raise _bad(request, f"master_key of {len(key)} bytes exceeds {MAX_MASTER_KEY_BYTES}")


def _flags(request: Request, flags: int, allowed: int) -> None:
    if flags < 0 or flags & ~allowed:
        raise _bad(request, f"flags {flags:#x} has bits outside {allowed:#x}")


def bounded(request: Request, limits: RequestLimits) -> Request:
    """The request with every client-controlled field checked, and a BATCH_READ's size and count capped.

    Raises BadRequestError naming the field. Pure: the server's first step for each request.
    """
    _id(request, "request id", request.rid)
    _id(request, "ledger_id", request.ledger_id)
    kind = type(request)
    if kind is AddRequest:
        _id(request, "entry_id", request.entry_id)
        _flags(request, request.flags, ADD_FLAGS)
        _key(request, request.master_key)
    elif kind is ReadRequest:
        _id(request, "entry_id", request.entry_id, low=LAST_ENTRY)
        _flags(request, request.flags, READ_FLAGS)
        _key(request, request.master_key)
    elif kind is BatchReadRequest:
        _id(request, "first_entry_id", request.first_entry_id)
        _id(request, "last_entry_id", request.last_entry_id, low=request.first_entry_id)
        if request.max_bytes < 1:
            raise _bad(request, f"max_bytes {request.max_bytes} must be >= 1")
        last = min(request.last_entry_id, request.first_entry_id + limits.max_batch_read_entries - 1)
        max_bytes = min(request.max_bytes, limits.max_batch_read_bytes)
        if last != request.last_entry_id or max_bytes != request.max_bytes:
            return BatchReadRequest(request.rid, request.ledger_id, request.first_entry_id, last, max_bytes)
    return request


# ---- encoding ------------------------------------------------------------

_pack = msgpack.Packer(use_bin_type=True).pack


def encode(message: Request | Response) -> bytes:
    """One frame: length prefix + msgpack array."""
    body = _pack(message.fields())
    return _LEN.pack(len(body)) + body


# ---- decoding ------------------------------------------------------------

_INT = int
_BYTES = (bytes,)


def _check(cond: bool, what: str, rid: int) -> None:
    if not cond:
        err = MalformedRequestError(what)
        err.rid = rid
        raise err


def _ints(values, rid: int, what: str) -> None:
    for v in values:
        _check(type(v) is _INT, f"{what}: expected integers", rid)


def _request(f: list) -> Request:
    op, rid = f[0], f[1]
    if op == ADD:
        _check(len(f) == 7, "ADD frame must have 7 fields", rid)
        _ints(f[2:5], rid, "ADD")
        _check(isinstance(f[5], _BYTES) and isinstance(f[6], _BYTES), "ADD key and body must be bytes", rid)
        return AddRequest(rid, f[2], f[3], f[4], f[5], f[6])
    if op == READ:
        _check(len(f) == 6, "READ frame must have 6 fields", rid)
        _ints(f[2:5], rid, "READ")
        _check(isinstance(f[5], _BYTES), "READ key must be bytes", rid)
        return ReadRequest(rid, f[2], f[3], f[4], f[5])
    if op == READ_LAC:
        _check(len(f) == 3, "READ_LAC frame must have 3 fields", rid)
        _ints(f[2:3], rid, "READ_LAC")
        return ReadLacRequest(rid, f[2])
    if op == BATCH_READ:
        _check(len(f) == 6, "BATCH_READ frame must have 6 fields", rid)
        _ints(f[2:6], rid, "BATCH_READ")
        return BatchReadRequest(rid, f[2], f[3], f[4], f[5])
    _check(False, f"unknown request op {op!r}", rid)
    raise AssertionError("unreachable")


def _response(f: list) -> Response:
    op, rid = f[0], f[1]
    _check(len(f) >= 3 and type(f[2]) is _INT, "response must carry an integer status", rid)
    if op == ADD and len(f) == 5:
        return AddResponse(rid, f[2], f[3], f[4])
    if op == READ and len(f) == 6:
        return ReadResponse(rid, f[2], f[3], f[4], f[5])
    if op == READ_LAC and len(f) == 5:
        return ReadLacResponse(rid, f[2], f[3], f[4])
    if op == BATCH_READ and len(f) == 5 and isinstance(f[4], list):
        return BatchReadResponse(rid, f[2], f[3], f[4])
    if op == ERROR and len(f) == 4:
        return ErrorResponse(rid, f[2], str(f[3]))
    _check(False, f"malformed response op {op!r} with {len(f)} fields", rid)
    raise AssertionError("unreachable")


class FrameDecoder:
    """Incremental frame decoder for one direction of one connection.

    ``side="server"`` decodes requests, ``side="client"`` decodes responses.
    """

    def __init__(self, side: str, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        if side not in ("server", "client"):
            raise ValueError(f"side must be 'server' or 'client', not {side!r}")
        self._parse = _request if side == "server" else _response
        self._max = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Request | Response]:
        # Frames are decoded from views: a whole frame that arrives in one read is never copied before
        # msgpack takes its fields out, and only a partial frame's bytes wait in the buffer.
        buf = self._buf
        if buf:
            buf += data
            src = buf
        else:
            src = data
        out = []
        pos = 0
        with memoryview(src) as view:
            n = len(view)
            while n - pos >= 4:
                (size,) = _LEN.unpack_from(view, pos)
                if size > self._max:
                    err = FrameTooLargeError(f"frame of {size} bytes exceeds the {self._max}-byte limit")
                    err.rid = -1
                    raise err
                if n - pos - 4 < size:
                    break
                with view[pos + 4 : pos + 4 + size] as raw:
                    out.append(self._decode(raw))
                pos += 4 + size
            if src is not buf and pos < n:
                buf += view[pos:]
        if src is buf and pos:
            del buf[:pos]
        return out

    def _decode(self, raw: bytes | memoryview) -> Request | Response:
        try:
            fields = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
        except Exception as exc:  # msgpack raises several unrelated types
            err = MalformedRequestError(f"frame is not valid msgpack: {exc}")
            err.rid = -1
            raise err from exc
        if not isinstance(fields, list) or len(fields) < 2 or type(fields[0]) is not _INT or type(fields[1]) is not _INT:
            err = MalformedRequestError("frame must be a msgpack array starting [op, request_id]")
            err.rid = -1
            raise err
        return self._parse(fields)
