"""The attacks of the `hostile` suite, each a function of (port, topic, seconds) that returns what it did and
what the broker told it. They run in a child process of the bench (loadtest.bench.hostile), so their CPU and
GIL use never delays the good client's callbacks in the bench process itself: only the broker is shared.

Every attack speaks the Pulsar binary protocol by hand (magnetar.protocol.frames), because the official client
refuses to build these frames.
"""

from __future__ import annotations

import collections
import random
import selectors
import socket
import threading
import time

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command, encode_payload_command

T = pb.BaseCommand
HUGE = 2**31 - 1
ACK_IDS = 1000  # message ids per ACK frame: the clients' ackGroupingMaxSize


class _Raw:
    """One hand-driven connection; after ``listen()`` a thread tallies every reply until the broker closes it."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.decoder = FrameDecoder()
        self.frames: collections.deque = collections.deque()
        self.replies: collections.Counter = collections.Counter()
        self.messages: dict[str, str] = {}  # reply kind -> its first message text
        self.closed_after_s: float | None = None
        self._opened = time.monotonic()
        self._reader: threading.Thread | None = None
        self._closing = False
        self.send_error: str | None = None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self):
        while not self.frames:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionResetError("the broker closed the connection")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.popleft().command

    def connect(self) -> None:
        self.send(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="hostile-bench",
                                                                              protocol_version=20))))
        reply = self.next()
        if reply.type != T.CONNECTED:
            raise RuntimeError(f"CONNECT answered {T.Type.Name(reply.type)}")

    def expect(self, type_) -> None:
        reply = self.next()
        if reply.type != type_:
            raise RuntimeError(f"expected {T.Type.Name(type_)}, got {T.Type.Name(reply.type)}: {reply}")

    def listen(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                cmd = self.next()
                kind = _describe(cmd)
                self.replies[kind] += 1
                text = _message_text(cmd)
                if text and kind not in self.messages:
                    self.messages[kind] = text
        except (OSError, ValueError):
            if not self._closing:
                self.closed_after_s = time.monotonic() - self._opened

    def close(self) -> dict:
        """Close and say what the broker answered: each kind of reply with its count and first message."""
        self._closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self._reader is not None:
            self._reader.join(5)
        return {"replies": dict(self.replies), "messages": dict(self.messages),
                "closed_by_broker_after_s": self.closed_after_s, "send_error": self.send_error}


def owner_port(port: int, topic: str, hops: int = 5) -> int:
    """The port of the broker (worker) that owns ``topic``, found with LOOKUP as a client finds it: the hand-built
    attacks must meet the good client on the worker that serves its topic, not on whichever worker they dial."""
    authoritative = False
    for _ in range(hops):
        conn = _Raw(port)
        try:
            conn.connect()
            conn.send(encode_command(command(T.LOOKUP, lookupTopic=pb.CommandLookupTopic(
                topic=topic, request_id=1, authoritative=authoritative))))
            reply = conn.next()
        finally:
            conn.close()
        if reply.type != T.LOOKUP_RESPONSE or reply.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed:
            raise RuntimeError(f"LOOKUP of {topic} answered {reply}")
        answer = reply.lookupTopicResponse
        port = int(answer.brokerServiceUrl.rsplit(":", 1)[1].rstrip("/"))
        if answer.response == pb.CommandLookupTopicResponse.Connect:
            return port
        authoritative = answer.authoritative
    raise RuntimeError(f"LOOKUP of {topic}: still redirected after {hops} hops")


def _describe(cmd) -> str:
    name = T.Type.Name(cmd.type)
    for field, code in (("send_error", "error"), ("error", "error"), ("ackResponse", "error")):
        if cmd.HasField(field) and getattr(cmd, field).HasField(code):
            return f"{name} {pb.ServerError.Name(getattr(getattr(cmd, field), code))}"
    return name


def _message_text(cmd) -> str:
    for field in ("send_error", "error", "ackResponse"):
        if cmd.HasField(field) and getattr(cmd, field).HasField("message"):
            return getattr(cmd, field).message
    return ""


def _subscribe(conn: _Raw, topic: str, subscription: str) -> None:
    conn.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription=subscription, subType=pb.CommandSubscribe.Exclusive, consumer_id=1,
        request_id=1, initialPosition=pb.CommandSubscribe.Earliest))))
    conn.expect(T.SUCCESS)


def _producer(conn: _Raw, topic: str) -> None:
    conn.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))))
    conn.expect(T.PRODUCER_SUCCESS)


def _ack(ids, cumulative: bool, request_id: int) -> bytes:
    kind = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    return encode_command(command(T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=kind, message_id=ids,
                                                           request_id=request_id)))


def _flood(conn: _Raw, frames, seconds: float) -> int:
    """Send ``frames(i)`` back to back until ``seconds`` pass (as fast as the broker reads); the count sent."""
    deadline, sent = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        try:
            conn.send(frames(sent))
        except OSError as exc:  # the broker closed the connection: close() reports it
            conn.send_error = f"{type(exc).__name__}: {exc}"
            break
        sent += 1
    return sent


def ack_bomb(port: int, topic: str, seconds: float) -> dict:
    """ACKs whose bitset is read against batch_size 2^31-1, for a real entry and 999 invented ones after it."""
    conn = _Raw(port)
    conn.connect()
    _subscribe(conn, topic, "hostile-ack-bomb")
    conn.send(encode_command(command(T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=10))))
    message = conn.next()
    while message.type != T.MESSAGE:
        message = conn.next()
    ledger, entry = message.message.message_id.ledgerId, message.message.message_id.entryId
    ids = [pb.MessageIdData(ledgerId=ledger, entryId=entry + k, ack_set=[1], batch_size=HUGE) for k in range(ACK_IDS)]
    conn.listen()
    individual, cumulative = _ack(ids, False, 1), _ack(ids[:1], True, 2)  # built once: the attacker's CPU is cheap
    frames = _flood(conn, lambda i: cumulative if i % 10 == 9 else individual, seconds)
    return {"frames": frames, "ids_per_frame": ACK_IDS, **conn.close()}


def poison_batch(port: int, topic: str, seconds: float) -> dict:
    """SENDs declaring 2^31-1 messages (num_messages and num_messages_in_batch) in a 100-byte payload."""
    conn = _Raw(port)
    conn.connect()
    _producer(conn, topic)
    conn.listen()

    metadata = pb.MessageMetadata(producer_name="hostile", sequence_id=0, publish_time=int(time.time() * 1000),
                                  num_messages_in_batch=HUGE)
    frame = encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0, num_messages=HUGE)),
                                   metadata, b"x" * 100)
    return {"frames": _flood(conn, lambda i: frame, seconds), **conn.close()}


def silent_connections(port: int, topic: str, seconds: float, count: int = 2000) -> dict:
    """``count`` connections that never send a byte, held until the broker closes them or ``seconds`` pass."""
    selector = selectors.DefaultSelector()
    opened: dict[socket.socket, float] = {}
    failed: collections.Counter = collections.Counter()
    start = time.monotonic()
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError as exc:
            failed[type(exc).__name__] += 1
            continue
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        opened[sock] = time.monotonic()
    open_s = time.monotonic() - start
    closed_after: list[float] = []
    deadline = time.monotonic() + seconds  # each connection gets the whole window, however long opening took
    while opened and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                closed_after.append(time.monotonic() - opened.pop(sock))
                selector.unregister(sock)
                sock.close()
    still_open = len(opened)
    for sock in opened:
        sock.close()
    selector.close()
    closed_after.sort()
    return {"connections": count, "opened": count - sum(failed.values()), "connect_failures": dict(failed),
            "open_s": open_s, "closed_by_broker": len(closed_after), "still_open_at_end": still_open,
            "closed_after_s_min": closed_after[0] if closed_after else None,
            "closed_after_s_max": closed_after[-1] if closed_after else None}


def producer_creates(port: int, topic: str, seconds: float, count: int = 10_000) -> dict:
    """``count`` PRODUCER commands on one connection, pipelined; held until ``seconds`` pass, then closed."""
    conn = _Raw(port)
    conn.connect()
    conn.listen()
    start = time.monotonic()
    for first in range(1, count + 1, 1000):
        conn.send(b"".join(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=i, request_id=i))) for i in range(first, min(first + 1000, count + 1))))
    answered_s = None
    while time.monotonic() < start + seconds:
        if sum(conn.replies.values()) >= count:
            answered_s = answered_s or time.monotonic() - start
        time.sleep(0.05)  # holding the producers open for the attack window, not a synchronisation
    return {"producers": count, "all_answered_s": answered_s, **conn.close()}


def big_messages_unread(port: int, topic: str, seconds: float, size: int = 5 * 1024 * 1024) -> dict:
    """5 MiB messages sent back to back by a producer that never reads its receipts, on a topic of its own in
    the good client's namespace (same broker, bookies and journals). On the good client's own topic each small
    message would be ordered behind a 5 MiB one -- a topic is one ordered log, in Pulsar as here -- which
    measures the topic's order, not whether one client can hurt another."""
    conn = _Raw(port)
    conn.connect()
    _producer(conn, topic + "-big")
    conn.sock.settimeout(2.0)
    payload = b"x" * size
    sent = longest_block_s = 0.0
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        metadata = pb.MessageMetadata(producer_name="hostile-big", sequence_id=i, publish_time=int(time.time() * 1000))
        frame = memoryview(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=i)),
                                                  metadata, payload))
        while frame and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                n = conn.sock.send(frame)
            except socket.timeout:
                n = 0
            longest_block_s = max(longest_block_s, time.monotonic() - t0)
            frame = frame[n:]
            sent += n
        i += 1
    # Only now read what the broker answered meanwhile: receipts it could not write waited in its buffers.
    conn.listen()
    time.sleep(1.0)  # give the reader a moment to drain what is already queued, a measurement not a sync
    return {"message_bytes": size, "messages_started": i, "mib_sent": sent / 2**20,
            "longest_blocked_send_s": longest_block_s, **conn.close()}


def far_future_acks(port: int, topic: str, seconds: float, seed: int = 18) -> dict:
    """ACKs of random positions far beyond the topic's end (individual, and one in ten cumulative)."""
    rng = random.Random(seed)
    conn = _Raw(port)
    conn.connect()
    _subscribe(conn, topic, "hostile-far-acks")
    conn.listen()

    frames = [_ack([pb.MessageIdData(ledgerId=rng.randrange(1 << 40, 1 << 63), entryId=rng.randrange(1 << 62))
                    for _ in range(1 if i % 10 == 9 else ACK_IDS)], i % 10 == 9, i) for i in range(50)]
    return {"frames": _flood(conn, lambda i: frames[i % len(frames)], seconds), "ids_per_frame": ACK_IDS,
            **conn.close()}


ATTACKS = {
    "ack_bomb": ack_bomb,
    "poison_batch": poison_batch,
    "silent_connections": silent_connections,
    "producer_creates": producer_creates,
    "far_future_acks": far_future_acks,
    "big_messages_unread": big_messages_unread,
}


def run_attack(name: str, port: int, topic: str, seconds: float, kwargs: dict) -> dict:
    """The child process's entry point: one attack, timed."""
    start = time.monotonic()
    try:
        result = ATTACKS[name](port, topic, seconds, **kwargs)
    except Exception as exc:  # the attacker's own failure is a finding too (e.g. the broker closed it mid-attack)
        result = {"attacker_error": f"{type(exc).__name__}: {exc}"}
    result["attack_s"] = time.monotonic() - start
    return result
