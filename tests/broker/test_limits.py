"""The broker-wide bounds as pure objects: connection counting, and the publish buffer pausing and resuming reads."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.server.limits import PUBLISH_BUFFER, ConnectionLimits, PublishBuffer
from broker.server.tasks import MAX_PENDING_ACK_IDS, MAX_PENDING_SENDS, CommandTasks


def test_connection_limits_count_in_all_and_per_address():
    limits = ConnectionLimits(max_connections=3, max_per_ip=2)
    assert limits.admit("10.0.0.1") is None and limits.admit("10.0.0.1") is None
    assert "brokerMaxConnectionsPerIp" in limits.admit("10.0.0.1")
    assert limits.admit("10.0.0.2") is None
    assert "brokerMaxConnections" in limits.admit("10.0.0.3")
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.3") is None
    assert limits.total == 3 and dict(limits.by_ip) == {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1}


def test_unlimited_admits_everything():
    limits = ConnectionLimits()
    assert all(limits.admit("127.0.0.1") is None for _ in range(10_000))


class Transport:
    def __init__(self):
        self.reading = True

    def pause_reading(self):
        assert self.reading, "paused twice"
        self.reading = False

    def resume_reading(self):
        assert not self.reading, "resumed while reading"
        self.reading = True


def _connection(buffer: PublishBuffer, max_message_size: int = 5 * 1024 * 1024):
    conn = SimpleNamespace(transport=Transport(), closed=False, service=SimpleNamespace(publish_buffer=buffer),
                           config=SimpleNamespace(max_message_size=max_message_size), handled=0)
    conn.handle_frames = lambda: setattr(conn, "handled", conn.handled + 1)
    conn.tasks = CommandTasks(conn)
    return conn


def test_the_publish_buffer_pauses_senders_over_it_and_resumes_them_at_half():
    buffer = PublishBuffer(limit_bytes=1000)
    a, b = _connection(buffer), _connection(buffer)
    a.tasks.send_started(600)
    assert a.transport.reading
    b.tasks.send_started(600)  # 1200 > 1000: the connection that sent over it stops being read
    assert not b.transport.reading and a.transport.reading
    a.tasks.send_started(100)  # a sends more while over: it stops too
    assert not a.transport.reading
    a.tasks.send_finished(600)  # 700: above half
    assert not a.transport.reading and not b.transport.reading
    b.tasks.send_finished(600)  # 100 <= 500: everyone reads again
    assert a.transport.reading and b.transport.reading and buffer.in_flight == 100


def test_two_reasons_to_pause_release_independently():
    buffer = PublishBuffer(limit_bytes=10)
    conn = _connection(buffer)
    for _ in range(MAX_PENDING_SENDS):
        conn.tasks.send_started(1)
    assert not conn.transport.reading  # both the buffer and the unanswered sends say stop
    conn.tasks.resume_reading(PUBLISH_BUFFER)
    assert not conn.transport.reading  # still too many unanswered sends
    for _ in range(MAX_PENDING_SENDS):
        conn.tasks.send_finished(1)
    assert conn.transport.reading


def test_a_connection_pauses_at_one_maximum_message_of_unanswered_send_bytes():
    conn = _connection(PublishBuffer(limit_bytes=0), max_message_size=1000)
    conn.tasks.send_started(600)
    assert conn.transport.reading
    conn.tasks.send_started(400)  # 1000: one maximum-size message in flight
    assert not conn.transport.reading
    conn.tasks.send_finished(600)  # 400 < 500: reading again
    assert conn.transport.reading and conn.tasks.pending_send_bytes == 400


def test_acks_not_yet_applied_hold_reading_and_frames_until_half_are_done():
    async def scenario():
        conn = _connection(PublishBuffer(limit_bytes=0))
        conn.tasks.ack_started(MAX_PENDING_ACK_IDS - 1)
        assert conn.transport.reading and not conn.tasks.holding_frames
        conn.tasks.ack_started(1)
        assert not conn.transport.reading and conn.tasks.holding_frames
        conn.tasks.ack_finished(1)  # above half: still held
        assert conn.tasks.holding_frames
        conn.tasks.ack_finished(MAX_PENDING_ACK_IDS // 2)
        assert conn.transport.reading and not conn.tasks.holding_frames
        await asyncio.sleep(0)  # one loop turn: the frames held meanwhile are handled
        assert conn.handled == 1

    asyncio.run(scenario())
