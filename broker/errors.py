"""The broker's one exception hierarchy, bound to the Pulsar protocol's ServerError codes.

Each class binds one wire code (``@register(pb.X)``); its ``code``,
``retriable`` flag and admin-REST ``http_status`` come from the one table in
``magnetar.protocol.server_errors``, shared with the client. The connection
layer turns any ``BrokerError`` into a CommandError / CommandSendError with
that code and the message, and ``for_code`` maps a received code back to a
class. ``retriable`` tells a client whether trying again may succeed.

Storage and metadata errors enter the broker through one seam, below:
``persistence_errors`` (a topic's managed ledger and cursors: any StorageError
becomes a PersistenceError) and ``metadata_errors`` (the metadata store: a
MetadataError becomes a BrokerMetadataError), both ``raise ... from`` with the
message "<what the broker was doing>: <the storage error>". Sites that give a
storage error a meaning of their own (NoNodeError as "not found", a fenced
managed ledger as a moved topic) catch that subclass inside the block.
"""

from __future__ import annotations

import contextlib

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.server_errors import ServerErrorRegistry
from storage.errors import MetadataError, StorageError

_REGISTRY = ServerErrorRegistry(describe=lambda cls, code: cls.__doc__ or f"server error {code}")
register = _REGISTRY.register
for_code = _REGISTRY.for_code


@register(pb.UnknownError)
class BrokerError(Exception):
    """Unknown broker error."""

    code: int
    retriable: bool
    http_status: int


@register(pb.MetadataError)
class BrokerMetadataError(BrokerError):
    """The metadata store failed or rejected the operation."""


@register(pb.PersistenceError)
class PersistenceError(BrokerError):
    """The topic's storage failed the operation."""


@register(pb.AuthenticationError)
class AuthenticationError(BrokerError):
    """The client's credentials are missing, malformed or not accepted."""


@register(pb.AuthorizationError)
class AuthorizationError(BrokerError):
    """The role is not allowed to do this (authorization; HTTP 403)."""


@register(pb.ConsumerBusy)
class ConsumerBusyError(BrokerError):
    """The subscription does not accept another consumer."""


@register(pb.ServiceNotReady)
class ServiceNotReadyError(BrokerError):
    """The broker cannot serve this topic right now."""


@register(pb.ChecksumError)
class ChecksumError(BrokerError):
    """The message's CRC32C does not match its bytes."""


@register(pb.UnsupportedVersionError)
class UnsupportedVersionError(BrokerError):
    """The client's protocol version or feature is not supported."""


@register(pb.TopicNotFound)
class TopicNotFoundError(BrokerError):
    """The topic does not exist."""


@register(pb.SubscriptionNotFound)
class SubscriptionNotFoundError(BrokerError):
    """The subscription does not exist."""


@register(pb.ConsumerNotFound)
class ConsumerNotFoundError(BrokerError):
    """No consumer with that id on this connection."""


@register(pb.ProducerBlockedQuotaExceededError)
class ProducerBlockedQuotaExceededError(BrokerError):
    """The topic's backlog quota is exceeded and its policy is producer_request_hold: the producer is not admitted
    until the backlog drops (the official clients keep retrying until their send timeout)."""


@register(pb.ProducerBlockedQuotaExceededException)
class ProducerBlockedQuotaExceededException(BrokerError):
    """The topic's backlog quota is exceeded and its policy is producer_exception: sends fail."""


@register(pb.TooManyRequests)
class TooManyRequestsError(BrokerError):
    """Too many requests in flight."""


@register(pb.TopicTerminatedError)
class TopicTerminatedError(BrokerError):
    """The topic was terminated: it accepts no more messages."""


@register(pb.ProducerBusy)
class ProducerBusyError(BrokerError):
    """The topic does not accept this producer (name in use or access mode conflict)."""


@register(pb.InvalidTopicName)
class InvalidTopicNameError(BrokerError):
    """The topic name is not valid."""


@register(pb.IncompatibleSchema)
class IncompatibleSchemaError(BrokerError):
    """The schema is incompatible with the topic's."""


@register(pb.ConsumerAssignError)
class ConsumerAssignError(BrokerError):
    """The consumer could not be assigned (e.g. overlapping Key_Shared ranges)."""


@register(pb.NotAllowedError)
class NotAllowedError(BrokerError):
    """The operation is not allowed (message too large, limit reached, ...)."""


@register(pb.ProducerFenced)
class ProducerFencedError(BrokerError):
    """A newer exclusive producer fenced this one."""


class TopicFencedError(ServiceNotReadyError):
    """This broker no longer owns the topic; clients must look it up again."""


class ServedElsewhereError(ServiceNotReadyError):
    """Another broker owns what was asked about: an admin request is sent on there (broker/http/forwarding.py)."""

    def __init__(self, message: str, owner):
        super().__init__(message)
        self.owner = owner


class TopicServedElsewhereError(ServedElsewhereError):
    """Another broker owns the topic's bundle: a client looks it up again; an admin request goes there."""


class BundleServedElsewhereError(ServedElsewhereError):
    """Another broker owns the bundle a browser asked to unload or split: sent on there (a browser cannot follow
    the 307 other callers get to another origin)."""


class InvalidBundleError(BrokerError):
    """The bundle range is malformed (admin REST answers 412, as for an invalid name)."""

    http_status = 412


def from_storage(exc: StorageError, doing: str = "", into: type[BrokerError] = PersistenceError) -> BrokerError:
    """The broker error for a storage error met while ``doing`` something; raise it ``from exc``."""
    return into(f"{doing}: {exc}" if doing else str(exc))


@contextlib.contextmanager
def persistence_errors(doing: str):
    """Any StorageError raised in the block (a topic's managed ledger or cursor) leaves it as a PersistenceError."""
    try:
        yield
    except StorageError as exc:
        raise from_storage(exc, doing) from exc


@contextlib.contextmanager
def metadata_errors(doing: str):
    """A MetadataError raised in the block (the metadata store) leaves it as a BrokerMetadataError."""
    try:
        yield
    except MetadataError as exc:
        raise from_storage(exc, doing, BrokerMetadataError) from exc
