"""A consumer attached to a subscription: its flow permits, what it holds unacknowledged, and sending to it.

Permits count messages, as in Pulsar: the client grants them with FLOW and
each delivered entry spends the number of messages in it (a batch spends its
batch size less the messages already acknowledged by batch index, which the
client drops and never counts: otherwise a consumer fed partly acknowledged
batches runs out of permits for good), so a consumer may briefly be below
zero. What was sent and not yet acknowledged is the consumer's pending-ack
set; when the consumer leaves, the subscription hands those positions to the
next consumer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.subscriptions.pending_acks import PendingAcks
from broker.subscriptions.unacked_limits import UnackedLimits


@dataclass
class DispatchedEntry:
    """One ledger entry on its way to a consumer, with what the MESSAGE command needs."""

    position: tuple[int, int]
    data: bytes  # headers and payload exactly as the producer sent them
    num_messages: int
    key_hash: int = 0
    redelivery_count: int = 0
    ack_set: list[int] | None = None  # batch indexes still unacknowledged, as a long-array bitset

    @property
    def messages_to_deliver(self) -> int:
        if self.ack_set is None:
            return self.num_messages
        return min(self.num_messages, sum(bin(w & 0xFFFF_FFFF_FFFF_FFFF).count("1") for w in self.ack_set))


def _ignores_end_of_topic(client_version: str) -> bool:
    return client_version.startswith(("Pulsar-CPP", "Pulsar-C-", "Pulsar-Python"))


@dataclass(eq=False)
class Consumer:
    consumer_id: int
    name: str
    connection: object  # broker.server.connection.ServerConnection
    priority_level: int = 0
    key_shared_meta: object | None = None
    partition_index: int = -1
    permits: int = 0
    max_unacked_messages: int = 0  # 0 = unlimited
    track_pending_acks: bool = True
    pending: PendingAcks = field(default_factory=PendingAcks)
    blocked: bool = False
    msg_out: int = 0
    bytes_out: int = 0
    redeliveries: int = 0
    connected_since_ms: int = 0
    told_end_of_topic: bool = False

    def reached_end_of_topic(self) -> None:
        """The topic is terminated and this consumer has been sent all of it: REACHED_END_OF_TOPIC, once.

        Not to the C++ client and the clients built on it (Python, C): version 3.x treats the command as
        invalid and drops the connection, then reconnects into the same answer, forever. Those consumers
        simply wait at the end, as before termination; their producers are refused all the same."""
        if _ignores_end_of_topic(getattr(self.connection, "client_version", "")):
            self.told_end_of_topic = True
        if not self.told_end_of_topic:
            self.told_end_of_topic = True
            self.connection.out.reached_end_of_topic(self.consumer_id)

    @property
    def address(self) -> str:
        return getattr(self.connection, "remote_address", "")

    @property
    def unacked_messages(self) -> int:
        return self.pending.unacked_messages

    def can_take(self) -> bool:
        return self.permits > 0 and not self.blocked and getattr(self.connection, "writable", True)

    def deliver(self, entries: list[DispatchedEntry]) -> None:
        """Send entries as MESSAGE commands, spend permits, remember them as pending acks."""
        for e in entries:
            self.connection.out.message(self.consumer_id, e.position, e.data, e.redelivery_count, e.ack_set, self.partition_index)
            self.permits -= e.messages_to_deliver
            self.msg_out += e.num_messages
            self.bytes_out += len(e.data)
            if self.track_pending_acks:
                self.pending.add(e.position, e.num_messages, e.key_hash)
        self._update_blocked()

    def flow(self, permits: int) -> None:
        self.permits += permits

    def acked(self) -> None:
        self._update_blocked()

    def _update_blocked(self) -> None:
        """Block at the unacked limit, unblock at half of it (Pulsar's hysteresis, in unacked_limits.UnackedLimits)."""
        limits = UnackedLimits(max_unacked_messages_per_consumer=self.max_unacked_messages)
        self.blocked = limits.consumer_blocked(self.blocked, self.unacked_messages)

    def close(self, notify: bool = True) -> None:
        """The broker closes this consumer (topic unloaded, subscription reset): the client will resubscribe."""
        if notify:
            self.connection.out.close_consumer(self.consumer_id)
        self.connection.consumers.pop(self.consumer_id, None)
