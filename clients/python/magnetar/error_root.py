"""The root of the client's exception hierarchy and the official client's result codes it carries.

Apart from ``magnetar.errors`` (the classes bound to the ServerError table) so that the codec's errors
(``magnetar.protocol.errors``) can derive from ``MagnetarError`` while ``magnetar.errors`` reads the table in
``magnetar.protocol``: both import this module, neither imports the other's package back. Import the names
from ``magnetar`` or ``magnetar.errors``.
"""

from __future__ import annotations

import enum


class Result(enum.IntEnum):
    """The official client's result codes, same names and values (``pulsar.Result``): what ``send_async``
    callbacks receive. ``Result.Ok`` on success; an error's code is its class's ``result``."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45

    def __str__(self) -> str:  # "Result.Ok", as the official client prints it (IntEnum prints the number)
        return f"Result.{self.name}"


class MagnetarError(Exception):
    """Base of every error the client raises."""

    code: int | None = None
    retriable = False
    http_status = 500
    result = Result.UnknownError
