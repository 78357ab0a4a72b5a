"""The client's one exception hierarchy: the broker's ServerError codes map to specific classes.

``for_code(code, message)`` is the single translation from the wire; socket
and timeout errors are converted where they enter (``raise ... from``).
``retriable`` says whether the client may try again by itself (after a
reconnect or lookup).
"""

from __future__ import annotations

_BY_CODE: dict[int, type["MagnetarError"]] = {}


def _code(code: int):
    def bind(cls):
        cls.code = code
        _BY_CODE[code] = cls
        return cls
    return bind


class MagnetarError(Exception):
    """Base of every error the client raises."""

    code: int | None = None
    retriable = False


@_code(0)
class UnknownError(MagnetarError):
    pass


@_code(1)
class BrokerMetadataError(MagnetarError):
    retriable = True


@_code(2)
class BrokerPersistenceError(MagnetarError):
    retriable = True


@_code(5)
class ConsumerBusy(MagnetarError):
    pass


@_code(6)
class ServiceNotReady(MagnetarError):
    retriable = True


@_code(9)
class ChecksumError(MagnetarError):
    pass


@_code(10)
class UnsupportedVersionError(MagnetarError):
    pass


@_code(11)
class TopicNotFound(MagnetarError):
    pass


@_code(12)
class SubscriptionNotFound(MagnetarError):
    pass


@_code(13)
class ConsumerNotFound(MagnetarError):
    pass


@_code(14)
class TooManyRequests(MagnetarError):
    retriable = True


@_code(15)
class TopicTerminated(MagnetarError):
    pass


@_code(16)
class ProducerBusy(MagnetarError):
    pass


@_code(17)
class InvalidTopicName(MagnetarError):
    pass


@_code(18)
class IncompatibleSchema(MagnetarError):
    pass


@_code(22)
class NotAllowed(MagnetarError):
    pass


@_code(25)
class ProducerFenced(MagnetarError):
    pass


class Timeout(MagnetarError):
    """The operation did not complete in time."""

    retriable = True


class ConnectError(MagnetarError):
    """The broker could not be reached."""

    retriable = True


class AlreadyClosed(MagnetarError):
    """The client, producer or consumer is closed."""


class InvalidConfiguration(MagnetarError):
    """An option, or a call the consumer or producer was not configured for (e.g. reconsume_later without retry)."""


class InvalidMessage(MagnetarError):
    """A message that cannot be handled as asked (e.g. a RECONSUMETIMES property that is not a count)."""


class MessageTooBig(MagnetarError):
    """The message is larger than the broker's maximum message size."""


def for_code(code: int, message: str = "") -> MagnetarError:
    cls = _BY_CODE.get(code, UnknownError)
    return cls(message or cls.__name__)


class ProducerQueueIsFull(MagnetarError):
    """The producer's pending-message limit is reached and it was told not to block."""
