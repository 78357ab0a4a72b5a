"""The client's one exception hierarchy: the broker's ServerError codes map to specific classes.

``for_code(code, message)`` is the single translation from the wire: each
class is bound to its code through the one ServerError table
(``magnetar.protocol.server_errors``), which also gives its ``retriable``
flag. Socket and timeout errors are converted where they enter
(``raise ... from``).
``retriable`` says whether the client may try again by itself (after a
reconnect or lookup); ``result`` is the matching ``Result`` code, which the
sync API's callbacks receive as the official client's do.
"""

from __future__ import annotations

from magnetar.error_root import MagnetarError, Result
from magnetar.protocol import pulsar_api_pb2 as _pb
from magnetar.protocol.server_errors import ServerErrorRegistry as _Registry


_REGISTRY = _Registry(describe=lambda cls, code: cls.__name__)
_code = _REGISTRY.register


@_code(_pb.UnknownError)
class UnknownError(MagnetarError):
    pass


@_code(_pb.MetadataError)
class BrokerMetadataError(MagnetarError):
    result = Result.BrokerMetadataError


@_code(_pb.PersistenceError)
class BrokerPersistenceError(MagnetarError):
    result = Result.BrokerPersistenceError


@_code(_pb.AuthenticationError)
class AuthenticationError(MagnetarError):
    result = Result.AuthenticationError


@_code(_pb.AuthorizationError)
class AuthorizationError(MagnetarError):
    result = Result.AuthorizationError


@_code(_pb.ConsumerBusy)
class ConsumerBusy(MagnetarError):
    result = Result.ConsumerBusy


@_code(_pb.ServiceNotReady)
class ServiceNotReady(MagnetarError):
    result = Result.ServiceUnitNotReady


@_code(_pb.ChecksumError)
class ChecksumError(MagnetarError):
    result = Result.ChecksumError


@_code(_pb.UnsupportedVersionError)
class UnsupportedVersionError(MagnetarError):
    result = Result.UnsupportedVersionError


@_code(_pb.TopicNotFound)
class TopicNotFound(MagnetarError):
    result = Result.TopicNotFound


@_code(_pb.SubscriptionNotFound)
class SubscriptionNotFound(MagnetarError):
    result = Result.SubscriptionNotFound


@_code(_pb.ConsumerNotFound)
class ConsumerNotFound(MagnetarError):
    result = Result.ConsumerNotFound


@_code(_pb.TooManyRequests)
class TooManyRequests(MagnetarError):
    result = Result.TooManyLookupRequestException


@_code(_pb.TopicTerminatedError)
class TopicTerminated(MagnetarError):
    result = Result.TopicTerminated


@_code(_pb.ProducerBlockedQuotaExceededError)
class ProducerBlockedQuotaExceededError(MagnetarError):
    """The topic's backlog quota (policy producer_request_hold) holds new producers until its backlog drops."""

    result = Result.ProducerBlockedQuotaExceededError


@_code(_pb.ProducerBlockedQuotaExceededException)
class ProducerBlockedQuotaExceededException(MagnetarError):
    """The topic's backlog quota (policy producer_exception) refuses producers."""

    result = Result.ProducerBlockedQuotaExceededException


@_code(_pb.ProducerBusy)
class ProducerBusy(MagnetarError):
    result = Result.ProducerBusy


@_code(_pb.InvalidTopicName)
class InvalidTopicName(MagnetarError):
    result = Result.InvalidTopicName


@_code(_pb.IncompatibleSchema)
class IncompatibleSchema(MagnetarError):
    result = Result.IncompatibleSchema


@_code(_pb.ConsumerAssignError)
class ConsumerAssignError(MagnetarError):
    """The broker could not assign the consumer (e.g. overlapping Key_Shared sticky ranges)."""

    result = Result.ConsumerAssignError


@_code(_pb.NotAllowedError)
class NotAllowed(MagnetarError):
    result = Result.NotAllowedError


@_code(_pb.ProducerFenced)
class ProducerFenced(MagnetarError):
    result = Result.ProducerFenced


class Timeout(MagnetarError):
    """The operation did not complete in time."""

    retriable = True
    result = Result.Timeout


class ConnectError(MagnetarError):
    """The broker could not be reached."""

    retriable = True
    result = Result.ConnectError


class AlreadyClosed(MagnetarError):
    """The client, producer or consumer is closed."""

    result = Result.AlreadyClosed


class InvalidConfiguration(MagnetarError):
    """An option, or a call the consumer or producer was not configured for (e.g. reconsume_later without retry)."""


class InvalidMessage(MagnetarError):
    """A message that cannot be handled as asked (e.g. a RECONSUMETIMES property that is not a count)."""


class MessageTooBig(MagnetarError):
    """The message is larger than the broker's maximum message size."""

    result = Result.MessageTooBig


def result_of(exc: BaseException) -> Result:
    """The ``Result`` code for an error (UnknownError for one that is not the client's own)."""
    return exc.result if isinstance(exc, MagnetarError) else Result.UnknownError


def for_code(code: int, message: str = "") -> MagnetarError:
    """The error for a ServerError code received from the broker (UnknownError for a code with no class)."""
    return _REGISTRY.for_code(code, message)


class ProducerQueueIsFull(MagnetarError):
    """The producer's pending-message limit is reached and it was told not to block."""

    result = Result.ProducerQueueIsFull
