"""magnetar: a pure-Python, asyncio-native client for the Apache Pulsar protocol, shaped like ``pulsar-client``.

``magnetar.Client`` is the synchronous API (built on ``magnetar.asyncio``);
the wire codec it shares with the broker is ``magnetar.protocol``.
"""

from magnetar.asyncio.consumer import ConsumerType, InitialPosition
from magnetar.asyncio.dead_letter import DeadLetterPolicy
from magnetar.asyncio.partitioned import PartitionsRoutingMode
from magnetar.asyncio.producer import BatchingType, ProducerAccessMode
from magnetar.auth import Authentication, AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from magnetar.compression import CompressionType
from magnetar.errors import *  # noqa: F401,F403 (the error classes are part of the top-level API)
from magnetar.errors import MagnetarError, Result
from magnetar.message import Message, MessageId
from magnetar.sync import Client, Consumer, Producer, Reader, TableView

# The official client's names, so code ports by changing the import.
ConsumerDeadLetterPolicy = DeadLetterPolicy
PulsarException = MagnetarError

__all__ = ["Authentication", "AuthenticationBasic", "AuthenticationTLS", "AuthenticationToken", "BatchingType", "Client", "CompressionType", "ConsumerDeadLetterPolicy", "DeadLetterPolicy", "PartitionsRoutingMode", "PulsarException", "ProducerAccessMode", "Consumer", "ConsumerType", "InitialPosition", "MagnetarError", "Message", "MessageId",
           "Producer", "Reader", "Result", "TableView"]
