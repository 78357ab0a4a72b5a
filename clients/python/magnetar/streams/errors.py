"""The Stream API's errors: one table of wire codes, shared by the broker and the client.

An error ends an RPC with a gRPC status and the trailing metadata key
``magnetar-error`` naming its code (the class name below); ``NotOwner`` adds
``magnetar-redirect``, the owner's stream address. The broker names codes from
``CODES`` (so it never types a string the client does not know) and the
client turns a status back into a class with ``from_rpc_error``. The classes
derive from the client's one root, ``MagnetarError``.
"""

from __future__ import annotations

import grpc

from magnetar.error_root import MagnetarError

ERROR_KEY = "magnetar-error"
REDIRECT_KEY = "magnetar-redirect"
AUTHORITATIVE_KEY = "magnetar-authoritative"  # sent by a client that followed a redirect: take the stream
START_KEY = "magnetar-start"  # a read's initial metadata: the position its start resolved to, "ledger:entry:slot"
END_NOTICE_KEY = "magnetar-end-notice"  # a write's call metadata: "true" asks for the in-band `ended` response

CODES: dict[str, type["StreamError"]] = {}


def _code(status: grpc.StatusCode, *, retriable: bool = False):
    def register(cls):
        cls.code_name = cls.__name__
        cls.status = status
        cls.retriable = retriable
        CODES[cls.__name__] = cls
        return cls
    return register


class StreamError(MagnetarError):
    """Base of the Stream API's errors."""

    code_name = "StreamError"
    status = grpc.StatusCode.UNKNOWN


@_code(grpc.StatusCode.INVALID_ARGUMENT)
class InvalidStreamRequest(StreamError):
    """A malformed name, policy, position or record (too big, too many)."""


@_code(grpc.StatusCode.NOT_FOUND)
class NamespaceNotFound(StreamError):
    pass


@_code(grpc.StatusCode.NOT_FOUND)
class StreamNotFound(StreamError):
    pass


@_code(grpc.StatusCode.ALREADY_EXISTS)
class NamespaceExists(StreamError):
    pass


@_code(grpc.StatusCode.ALREADY_EXISTS)
class StreamExists(StreamError):
    pass


@_code(grpc.StatusCode.FAILED_PRECONDITION)
class NamespaceNotEmpty(StreamError):
    pass


@_code(grpc.StatusCode.FAILED_PRECONDITION)
class WriterFenced(StreamError):
    """Another writer opened the stream (or another broker took it over): this writer may append no more."""


@_code(grpc.StatusCode.FAILED_PRECONDITION)
class PlacementUnsatisfiable(StreamError):
    """The namespace's placement (E/Qw/Qa, min_zones) cannot be met by the bookies there are: refused when the
    namespace is created, and when a stream of it needs a new ledger the bookies can no longer place."""


@_code(grpc.StatusCode.UNAUTHENTICATED)
class StreamAuthenticationError(StreamError):
    """The broker requires credentials and the call carried none, or carried ones it does not accept."""


@_code(grpc.StatusCode.PERMISSION_DENIED)
class StreamAuthorizationError(StreamError):
    """The authenticated role may not do this to this namespace or stream."""


@_code(grpc.StatusCode.OUT_OF_RANGE)
class PositionTruncated(StreamError):
    """The position or sequence number asked for lies before the stream's truncation point."""


@_code(grpc.StatusCode.OUT_OF_RANGE)
class InvalidPosition(StreamError):
    """The position lies beyond the end of the stream, or names no entry of it."""


@_code(grpc.StatusCode.UNAVAILABLE, retriable=True)
class NotOwner(StreamError):
    """Another broker serves the stream; ``redirect`` is its stream address (the client follows it)."""

    def __init__(self, message: str = "", redirect: str | None = None):
        super().__init__(message)
        self.redirect = redirect


@_code(grpc.StatusCode.UNAVAILABLE, retriable=True)
class StreamUnavailable(StreamError):
    """The broker could not be reached, or its storage failed the operation; trying again may succeed."""


@_code(grpc.StatusCode.RESOURCE_EXHAUSTED, retriable=True)
class TooManyRequests(StreamError):
    """A bound was reached (appends in flight, readers); back off and try again."""


def trailing_metadata(error) -> tuple[tuple[str, str], ...]:
    """What the broker sends with ``error``'s status: any error with this table's ``code_name`` (and a
    ``redirect`` for NotOwner), the client's classes or the broker's StreamApiError."""
    items = [(ERROR_KEY, error.code_name)]
    redirect = getattr(error, "redirect", None)
    if redirect:
        items.append((REDIRECT_KEY, redirect))
    return tuple(items)


def error_of(code_name: str, details: str, redirect: str | None = None) -> StreamError | None:
    """The error a ``magnetar-error`` code names (None for a code this table does not know)."""
    cls = CODES.get(code_name)
    if cls is NotOwner:
        return NotOwner(details, redirect or None)
    return None if cls is None else cls(details)


def from_rpc_error(exc: grpc.RpcError) -> StreamError:
    """The StreamError an RPC ended with (StreamUnavailable for transport failures and unknown codes)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(code)
    metadata = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    if (error := error_of(metadata.get(ERROR_KEY, ""), details, metadata.get(REDIRECT_KEY))) is not None:
        return error
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return StreamUnavailable(f"{code.name}: {details}")
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return TooManyRequests(details)
    return StreamError(f"{code.name}: {details}")
