"""Dead-letter and retry-letter topics: where a consumer sends a message it gives up on, for good or for now.

Both are client-side in Pulsar; the broker only stores and delivers.

Dead letter: a message whose redelivery count (negative acks, ack timeouts)
reached ``max_redeliver_count`` is published to the dead-letter topic and
acknowledged instead of being redelivered.

Retry letter (``subscribe(..., retry_enable=True)``, the Java and Go clients'
``enableRetry``/``RetryEnable``): the consumer subscribes to the retry-letter
topic too, under the same subscription. ``reconsume_later(msg, delay)``
publishes a copy of ``msg`` to the retry-letter topic with ``deliver_after=delay``
(so the broker holds it: Shared and Key_Shared subscriptions only, as for any
delayed message) and the properties ``RECONSUMETIMES`` (1, 2, ...),
``DELAY_TIME`` (ms), ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` (both kept from
the first time; the id in the Java client's ``ledger:entry:partition[:batch]`` form), then acknowledges the original. The copy that would make
``RECONSUMETIMES`` exceed ``max_redeliver_count`` goes to the dead-letter topic
instead, without delay.

Default names follow the current Java client: ``<topic>-<subscription>-RETRY``
and ``<topic>-<subscription>-DLQ``, where ``<topic>`` is the topic given to
subscribe (the first one of a list); with retry enabled and no policy,
``max_redeliver_count`` is 16. (The Java client's pre-2.11 names,
``<tenant>/<namespace>/<subscription>-RETRY``, are not looked for.)
"""

from __future__ import annotations

import time

from magnetar.topic_name import split_topic

RECONSUME_TIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DEFAULT_MAX_RECONSUME_TIMES = 16
RETRY_SUFFIX = "-RETRY"
DLQ_SUFFIX = "-DLQ"


class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries (or reconsumes) a message goes to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``) instead of coming back. ``retry_letter_topic`` names the
    topic ``reconsume_later`` publishes to when retry is enabled (default ``<topic>-<subscription>-RETRY``)."""

    def __init__(self, max_redeliver_count: int, dead_letter_topic: str | None = None,
                 retry_letter_topic: str | None = None):
        if not isinstance(max_redeliver_count, int) or max_redeliver_count < 1:
            raise ValueError(f"max_redeliver_count must be an integer >= 1, got {max_redeliver_count!r}")
        self.max_redeliver_count = max_redeliver_count
        self.dead_letter_topic = dead_letter_topic
        self.retry_letter_topic = retry_letter_topic

    def __repr__(self):
        return (f"DeadLetterPolicy({self.max_redeliver_count}, dead_letter_topic={self.dead_letter_topic!r}, "
                f"retry_letter_topic={self.retry_letter_topic!r})")


def base_topic(topic: str) -> str:
    """The topic a partition belongs to (``REAL_TOPIC`` names the partitioned topic, as in Java)."""
    return split_topic(topic)[0]


def with_retry_defaults(policy: DeadLetterPolicy | None, topic: str, subscription: str) -> DeadLetterPolicy:
    """The policy a retry-enabled subscription uses: the given one with both topic names filled in."""
    if policy is None:
        policy = DeadLetterPolicy(DEFAULT_MAX_RECONSUME_TIMES)
    return DeadLetterPolicy(
        policy.max_redeliver_count,
        dead_letter_topic=policy.dead_letter_topic or f"{topic}-{subscription}{DLQ_SUFFIX}",
        retry_letter_topic=policy.retry_letter_topic or f"{topic}-{subscription}{RETRY_SUFFIX}")


def dead_letter_topic(policy: DeadLetterPolicy, topic: str, subscription: str) -> str:
    return policy.dead_letter_topic or f"{topic}-{subscription}{DLQ_SUFFIX}"


def origin_message_id(mid) -> str:
    """``ORIGIN_MESSAGE_ID`` as the Java client writes it (its MessageId's toString): ``ledger:entry:partition``,
    with ``:batchIndex`` for a message of a batch; what a Java consumer of these topics expects to see."""
    text = f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}"
    return f"{text}:{mid.batch_index()}" if mid.batch_index() >= 0 else text


def origin_properties(properties: dict[str, str], topic: str, message_id: str) -> dict[str, str]:
    """A message's properties plus where it first came from (kept when it already says so)."""
    out = dict(properties)
    out.setdefault(REAL_TOPIC, base_topic(topic))
    out.setdefault(ORIGIN_MESSAGE_ID, message_id)
    return out


def reconsume_properties(properties: dict[str, str], topic: str, message_id: str, delay_ms: int,
                         custom: dict[str, str] | None = None) -> tuple[dict[str, str], int]:
    """The properties of a reconsume copy and its reconsume count (the previous count + 1, or 1).

    ``custom`` properties are added over the message's own; the system ones are set last. Raises
    ValueError when the message carries a ``RECONSUMETIMES`` that is not a non-negative integer.
    """
    out = origin_properties(properties, topic, message_id)
    out.update({str(k): str(v) for k, v in (custom or {}).items()})
    previous = out.get(RECONSUME_TIMES)
    if previous is None:
        times = 1
    elif previous.isdigit():
        times = int(previous) + 1
    else:
        raise ValueError(f"message {message_id} has {RECONSUME_TIMES}={previous!r}, not a count")
    out[RECONSUME_TIMES] = str(times)
    out[DELAY_TIME] = str(delay_ms)
    return out, times


def reconsume_goes_to_dead_letter(times: int, policy: DeadLetterPolicy) -> bool:
    return times > policy.max_redeliver_count


class LetterProducers:
    """A consumer's producers for its dead-letter and retry-letter topics, each created on first use."""

    def __init__(self, client):
        self.client = client
        self._producers: dict[str, object] = {}

    async def send(self, topic: str, msg, properties: dict[str, str], delay_ms: int = 0):
        """Publish ``msg``'s payload and keys to ``topic`` with ``properties``, held for ``delay_ms``."""
        producer = self._producers.get(topic)
        if producer is None:
            producer = await self.client.create_producer(topic, batching_enabled=False)
            self._producers[topic] = producer
        options = {}
        if delay_ms > 0:
            options["deliver_at"] = int(time.time() * 1000) + delay_ms
        if msg.ordering_key():
            options["ordering_key"] = msg.ordering_key()
        return await producer.send(msg.data(), properties=properties, partition_key=msg.partition_key() or None,
                                   **options)

    async def close(self) -> None:
        producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            await producer.close()
