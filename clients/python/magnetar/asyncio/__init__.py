"""The asyncio API of magnetar; the synchronous ``magnetar.Client`` is built on it."""

import importlib

# Imported on first use (PEP 562): the broker imports magnetar.asyncio.keepalive, which runs this file.
_LAZY = {
    "Client": ("magnetar.asyncio.client", "AsyncClient"), "Reader": ("magnetar.asyncio.client", "AsyncReader"),
    "Consumer": ("magnetar.asyncio.consumer", "AsyncConsumer"),
    "ConsumerType": ("magnetar.asyncio.consumer", "ConsumerType"),
    "InitialPosition": ("magnetar.asyncio.consumer", "InitialPosition"),
    "DeadLetterPolicy": ("magnetar.asyncio.dead_letter", "DeadLetterPolicy"),
    "Producer": ("magnetar.asyncio.producer", "AsyncProducer"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'magnetar.asyncio' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["Client", "Consumer", "ConsumerType", "DeadLetterPolicy", "InitialPosition", "Producer", "Reader"]
