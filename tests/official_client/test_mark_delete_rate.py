"""The mark-delete rate on a real broker with the official client: a burst of acknowledgements costs a bounded
number of cursor writes (managedLedgerDefaultMarkDeleteRateLimit, 1/s by default), the latest position is
written soon after the burst; a graceful restart writes what the rate put off, and a kill -9 redelivers only
the acknowledged messages whose position was not written yet (Pulsar's at-least-once).

The reference, in the same run: a namespace whose persistence policy sets managedLedgerMaxMarkDeleteRate 0
(every acknowledgement written) on the same broker."""

from __future__ import annotations

import time
import uuid

import pulsar

from storage.testing.waiting import wait_until
from tests.official_client.support import TIMEOUTS, admin_call as call, publish_all

MESSAGES = 300


def _cursor(broker, topic: str, sub: str) -> dict:
    path = "/admin/v2/" + topic.replace("://", "/") + "/internalStats"
    return call(broker, "GET", path)[1]["cursors"][sub]


WORK_S = 0.01  # a consumer's own work per message


def _consume_burst(client, broker, topic: str, sub: str) -> tuple[int, float]:
    """Publish MESSAGES, then receive and acknowledge each one (no receipts) after WORK_S of work; (cursor writes
    meanwhile, the seconds it took). The client groups acks for 100 ms, so the broker gets about one ACK command
    per 100 ms: 30 or so in all."""
    consumer = client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest)
    publish_all(client.create_producer(topic, batching_enabled=False), MESSAGES)
    before = _cursor(broker, topic, sub)["markDeleteWrites"]
    started = time.monotonic()
    for _ in range(MESSAGES):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        time.sleep(WORK_S)  # the work itself, not a wait for the broker
    consumer.close()  # its pending acknowledgements are sent before it closes
    elapsed = time.monotonic() - started
    return _cursor(broker, topic, sub)["markDeleteWrites"] - before, elapsed


def _persisted(broker, topic: str, sub: str) -> bool:
    cursor = _cursor(broker, topic, sub)
    return cursor["persistentMarkDeletePosition"] == cursor["markDeletePosition"] and cursor["numberOfEntriesSinceFirstNotAckedMessage"] == 0


def test_a_burst_of_acks_costs_about_one_cursor_write_a_second(standalone, client):
    unthrottled_ns = f"public/md-all-{uuid.uuid4().hex[:6]}"
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{unthrottled_ns}")[0] == 204
    assert call(standalone, "POST", f"/admin/v2/namespaces/{unthrottled_ns}/persistence",
                {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2,
                 "managedLedgerMaxMarkDeleteRate": 0})[0] == 204
    reference_topic = f"persistent://{unthrottled_ns}/t"
    reference_writes, reference_s = _consume_burst(client, standalone, reference_topic, "s")

    topic = f"persistent://public/default/md-rate-{uuid.uuid4().hex[:6]}"
    writes, elapsed = _consume_burst(client, standalone, topic, "s")
    print(f"{MESSAGES} acks: {writes} cursor writes in {elapsed:.2f} s at the default 1/s; "
          f"{reference_writes} in {reference_s:.2f} s with no limit")
    assert writes <= 1 + elapsed + 2, (writes, elapsed)
    assert reference_writes >= 3 * writes, (reference_writes, writes)
    # The last position is written once the rate allows, with no further acks and no close of the topic.
    wait_until(lambda: _persisted(standalone, topic, "s"), 5, "the latest position to be written")


def _burst(broker, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        publish_all(client.create_producer(topic, batching_enabled=False), MESSAGES)
        for _ in range(MESSAGES):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            time.sleep(WORK_S)  # several ACK commands, so most are put off
        consumer.close()
    finally:
        client.close()


def _redelivered(broker, topic: str) -> list[bytes]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "s")
        again = []
        try:
            while True:
                again.append(consumer.receive(timeout_millis=1500).data())
        except TIMEOUTS:
            return again
    finally:
        client.close()


def test_a_restart_writes_the_put_off_acks_and_a_kill9_redelivers_only_those_not_written(start_standalone):
    """A rate of one write per 100 s: after its first write every ack of the burst is put off."""
    broker = start_standalone(env={"MAGNETAR_BROKER_MANAGED_LEDGER_DEFAULT_MARK_DELETE_RATE_LIMIT": "0.01"})
    topic = f"persistent://public/default/md-restart-{uuid.uuid4().hex[:6]}"
    payloads = [f"m{i}".encode() for i in range(MESSAGES)]  # publish_all's payloads

    # A graceful stop: closing the topic writes what the rate put off; nothing comes back.
    _burst(broker, topic)
    cursor = _cursor(broker, topic, "s")
    assert cursor["deferredAcks"] >= 1 and cursor["persistentMarkDeletePosition"] != cursor["markDeletePosition"]
    broker.restart(timeout_s=60)
    assert _redelivered(broker, topic) == []

    # kill -9: exactly the messages after the last written position come back, in order (at-least-once).
    _burst(broker, topic)
    cursor = _cursor(broker, topic, "s")
    assert cursor["numberOfEntriesSinceFirstNotAckedMessage"] == 0
    written_entry = int(cursor["persistentMarkDeletePosition"].split(":")[1])
    last_entry = int(cursor["markDeletePosition"].split(":")[1])
    assert written_entry < last_entry
    broker.kill9()
    broker.start(timeout_s=60)
    again = _redelivered(broker, topic)
    assert again == payloads[MESSAGES - (last_entry - written_entry):], (len(again), written_entry, last_entry)
