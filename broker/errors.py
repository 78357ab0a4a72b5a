"""The broker's one exception hierarchy, mapped to the Pulsar protocol's ServerError codes.

Each class binds one wire code (``@register``); the connection layer turns any
``BrokerError`` into a CommandError / CommandSendError with that code and the
message, and ``for_code`` maps a received code back to a class. Storage errors
are translated where they enter the broker (``raise ... from``), never
re-exported. ``retriable`` tells a client whether trying again may succeed.
"""

from __future__ import annotations

_BY_CODE: dict[int, type["BrokerError"]] = {}


def register(code: int):
    """Class decorator: bind a ServerError code to an error class."""

    def bind(cls: type["BrokerError"]) -> type["BrokerError"]:
        if code in _BY_CODE:
            raise ValueError(f"server error {code} already bound to {_BY_CODE[code].__name__}")
        cls.code = code
        _BY_CODE[code] = cls
        return cls

    return bind


def for_code(code: int, message: str = "") -> "BrokerError":
    cls = _BY_CODE.get(code, BrokerError)
    return cls(message or cls.__doc__ or f"server error {code}")


@register(0)
class BrokerError(Exception):
    """Unknown broker error."""

    code: int = 0
    retriable: bool = False


@register(1)
class BrokerMetadataError(BrokerError):
    """The metadata store failed or rejected the operation."""

    retriable = True


@register(2)
class PersistenceError(BrokerError):
    """The topic's storage failed the operation."""

    retriable = True


@register(5)
class ConsumerBusyError(BrokerError):
    """The subscription does not accept another consumer."""


@register(6)
class ServiceNotReadyError(BrokerError):
    """The broker cannot serve this topic right now."""

    retriable = True


@register(9)
class ChecksumError(BrokerError):
    """The message's CRC32C does not match its bytes."""


@register(10)
class UnsupportedVersionError(BrokerError):
    """The client's protocol version or feature is not supported."""


@register(11)
class TopicNotFoundError(BrokerError):
    """The topic does not exist."""


@register(12)
class SubscriptionNotFoundError(BrokerError):
    """The subscription does not exist."""


@register(13)
class ConsumerNotFoundError(BrokerError):
    """No consumer with that id on this connection."""


@register(14)
class TooManyRequestsError(BrokerError):
    """Too many requests in flight."""

    retriable = True


@register(15)
class TopicTerminatedError(BrokerError):
    """The topic was terminated: it accepts no more messages."""


@register(16)
class ProducerBusyError(BrokerError):
    """The topic does not accept this producer (name in use or access mode conflict)."""


@register(17)
class InvalidTopicNameError(BrokerError):
    """The topic name is not valid."""


@register(18)
class IncompatibleSchemaError(BrokerError):
    """The schema is incompatible with the topic's."""


@register(19)
class ConsumerAssignError(BrokerError):
    """The consumer could not be assigned (e.g. overlapping Key_Shared ranges)."""


@register(22)
class NotAllowedError(BrokerError):
    """The operation is not allowed (message too large, limit reached, ...)."""


@register(25)
class ProducerFencedError(BrokerError):
    """A newer exclusive producer fenced this one."""


class TopicFencedError(ServiceNotReadyError):
    """This broker no longer owns the topic; clients must look it up again."""


class InvalidBundleError(BrokerError):
    """The bundle range is malformed (admin REST answers 412, as for an invalid name)."""
