"""magnetar: a pure-Python, asyncio-native client for the Apache Pulsar protocol, shaped like ``pulsar-client``.

``magnetar.Client`` is the synchronous API (built on ``magnetar.asyncio``);
the wire codec it shares with the broker is ``magnetar.protocol``.
"""

import importlib

from magnetar.errors import *  # noqa: F401,F403 (the error classes are part of the top-level API)
from magnetar.errors import MagnetarError, Result

# The rest of the top-level API is imported on first use (PEP 562): the broker imports magnetar.protocol,
# which runs this file, and every broker and bookie process would otherwise load the whole client at start.
_LAZY = {
    "ConsumerType": "magnetar.asyncio.consumer", "InitialPosition": "magnetar.asyncio.consumer",
    "DeadLetterPolicy": "magnetar.asyncio.dead_letter", "PartitionsRoutingMode": "magnetar.asyncio.partitioned",
    "BatchingType": "magnetar.asyncio.producer", "ProducerAccessMode": "magnetar.asyncio.producer",
    "Authentication": "magnetar.auth", "AuthenticationBasic": "magnetar.auth", "AuthenticationTLS": "magnetar.auth",
    "AuthenticationToken": "magnetar.auth", "CompressionType": "magnetar.compression",
    "Message": "magnetar.message", "MessageId": "magnetar.message",
    "Client": "magnetar.sync", "Consumer": "magnetar.sync", "Producer": "magnetar.sync", "Reader": "magnetar.sync",
    "TableView": "magnetar.sync",
}
# The official client's names, so code ports by changing the import.
_ALIASES = {"ConsumerDeadLetterPolicy": "DeadLetterPolicy"}
PulsarException = MagnetarError


def __getattr__(name: str):
    target = _ALIASES.get(name, name)
    if target not in _LAZY:
        raise AttributeError(f"module 'magnetar' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[target]), target)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_ALIASES})


__all__ = ["Authentication", "AuthenticationBasic", "AuthenticationTLS", "AuthenticationToken", "BatchingType", "Client", "CompressionType", "ConsumerDeadLetterPolicy", "DeadLetterPolicy", "PartitionsRoutingMode", "PulsarException", "ProducerAccessMode", "Consumer", "ConsumerType", "InitialPosition", "MagnetarError", "Message", "MessageId",
           "Producer", "Reader", "Result", "TableView"]
