"""The one table of the Pulsar protocol's ServerError codes, shared by the broker and the client.

Each ``pb.ServerError`` code has one row: its name in the protocol, whether a
client may try again by itself (after a reconnect or a lookup), and the HTTP
status the admin REST answers with when an error of that code ends a request.
The broker's and the client's exception hierarchies are separate (one root
per package) but both bind their classes to codes through a
``ServerErrorRegistry``, which copies ``code``, ``retriable`` and
``http_status`` from the row, so neither types a number in.

HTTP statuses follow what the admin REST has always answered: 412 for an
invalid name, 404 for a missing topic or subscription, 409 for an incompatible schema, 405 for an operation
not allowed, 412 for a busy subscription (Pulsar's answer to deleting one with consumers), 500 for the rest (401/403 for the authentication codes, which
Pulsar uses and no route raises yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import pulsar_api_pb2 as pb


@dataclass(frozen=True)
class ServerErrorCode:
    code: int
    name: str
    retriable: bool
    http_status: int


def _row(code: int, *, retriable: bool = False, http_status: int = 500) -> ServerErrorCode:
    return ServerErrorCode(code, pb.ServerError.Name(code), retriable, http_status)


SERVER_ERRORS: dict[int, ServerErrorCode] = {row.code: row for row in (
    _row(pb.UnknownError),
    _row(pb.MetadataError, retriable=True),
    _row(pb.PersistenceError, retriable=True),
    _row(pb.AuthenticationError, http_status=401),
    _row(pb.AuthorizationError, http_status=403),
    _row(pb.ConsumerBusy, http_status=412),  # Pulsar: a subscription with consumers is not deleted
    _row(pb.ServiceNotReady, retriable=True),
    _row(pb.ProducerBlockedQuotaExceededError),
    _row(pb.ProducerBlockedQuotaExceededException),
    _row(pb.ChecksumError),
    _row(pb.UnsupportedVersionError),
    _row(pb.TopicNotFound, http_status=404),
    _row(pb.SubscriptionNotFound, http_status=404),
    _row(pb.ConsumerNotFound),
    _row(pb.TooManyRequests, retriable=True),
    _row(pb.TopicTerminatedError),
    _row(pb.ProducerBusy),
    _row(pb.InvalidTopicName, http_status=412),
    _row(pb.IncompatibleSchema, http_status=409),
    _row(pb.ConsumerAssignError),
    _row(pb.TransactionCoordinatorNotFound),
    _row(pb.InvalidTxnStatus),
    _row(pb.NotAllowedError, http_status=405),
    _row(pb.TransactionConflict),
    _row(pb.TransactionNotFound),
    _row(pb.ProducerFenced),
)}


class ServerErrorRegistry:
    """Binds a package's exception classes to ServerError codes, and maps a received code back to one.

    ``register(code)`` is a class decorator that sets ``code``, ``retriable``
    and ``http_status`` from the table; each code binds at most one class. The
    class bound to ``UnknownError`` is what ``for_code`` builds for a code
    that has no class. ``describe(cls, code)`` gives the message when the wire
    carried none.
    """

    def __init__(self, describe: Callable[[type, int], str]):
        self._describe = describe
        self._by_code: dict[int, type[Exception]] = {}

    def register(self, code: int):
        if code not in SERVER_ERRORS:
            raise ValueError(f"{code} is not a ServerError code")
        row = SERVER_ERRORS[code]

        def bind(cls):
            if code in self._by_code:
                raise ValueError(f"server error {row.name} already bound to {self._by_code[code].__name__}")
            cls.code, cls.retriable, cls.http_status = row.code, row.retriable, row.http_status
            self._by_code[code] = cls
            return cls

        return bind

    def class_for(self, code: int) -> type[Exception]:
        """The class bound to ``code``, else the one bound to UnknownError."""
        return self._by_code.get(code) or self._by_code[pb.UnknownError]

    def for_code(self, code: int, message: str = "") -> Exception:
        cls = self.class_for(code)
        return cls(message or self._describe(cls, code))

    def bound(self) -> dict[int, type[Exception]]:
        return dict(self._by_code)
