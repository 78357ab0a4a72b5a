"""Key-based batching on a deduplicated topic: every acknowledged message is stored (nemesis seed 1)."""

from __future__ import annotations

import magnetar
from tests.official_client.support import admin_call, payloads, receive_n


def test_seed1_mixed_key_batching_dedup_acks_only_stored_messages(standalone):
    """Seed 1 of the mixed nemesis run: 192 messages of a key-based batching producer on a dedup topic were
    answered with the duplicate receipt (-1:-1) and never stored. Batches of interleaved keys carried
    interleaved sequence ids, so the broker took every batch after the first for a resend."""
    admin_call(standalone, "PUT", "/admin/v2/namespaces/public/keydedup")
    admin_call(standalone, "POST", "/admin/v2/namespaces/public/keydedup/deduplication", True)
    topic = "persistent://public/keydedup/orders"
    client = magnetar.Client(standalone.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="kb-1", batching_enabled=True,
                                          batching_type=magnetar.BatchingType.KeyBased,
                                          batching_max_publish_delay_ms=60_000)
        results = []
        for i in range(200):
            producer.send_async(f"{i}".encode(), lambda res, mid: results.append((res, mid)), partition_key=f"key-{i % 4}")
        producer.flush()
        assert len(results) == 200 and all(res == magnetar.Result.Ok for res, _ in results)
        assert all(mid.ledger_id() >= 0 and mid.entry_id() >= 0 for _, mid in results), \
            "a duplicate receipt (-1:-1) for a message that was never stored"
        got = sorted(int(p) for p in payloads(receive_n(consumer, 200, timeout_s=30)))
        assert got == list(range(200))
        # the batches covered contiguous, ascending sequence ids; the broker remembers the highest
        assert producer.last_sequence_id() == 199
    finally:
        client.close()
