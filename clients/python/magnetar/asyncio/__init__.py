"""The asyncio API of magnetar; the synchronous ``magnetar.Client`` is built on it."""

from magnetar.asyncio.client import AsyncClient as Client, AsyncReader as Reader
from magnetar.asyncio.consumer import AsyncConsumer as Consumer, ConsumerType, InitialPosition
from magnetar.asyncio.dead_letter import DeadLetterPolicy
from magnetar.asyncio.producer import AsyncProducer as Producer

__all__ = ["Client", "Consumer", "ConsumerType", "DeadLetterPolicy", "InitialPosition", "Producer", "Reader"]
