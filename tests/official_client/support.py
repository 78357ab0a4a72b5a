"""Helpers for driving the official `pulsar-client` (and `magnetar`) in tests: drain with a deadline, never sleep."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pulsar

import magnetar
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command
from storage.testing.waiting import wait_until

T = pb.BaseCommand

# Either client's "nothing arrived in time" (the helpers drive both).
TIMEOUTS = (pulsar.Timeout, magnetar.Timeout)


def receive_n(consumer, n: int, timeout_s: float = 20.0, ack: bool = True) -> list:
    """Receive exactly ``n`` messages (acknowledging each unless told not to) before the deadline."""
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise AssertionError(f"received {len(out)} of {n} messages before the deadline")
        try:
            msg = consumer.receive(timeout_millis=min(left_ms, 1000))
        except TIMEOUTS:
            continue
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def assert_nothing_more(consumer, within_ms: int = 500) -> None:
    """No further message arrives within ``within_ms`` (the broker had time to send one if it would)."""
    try:
        msg = consumer.receive(timeout_millis=within_ms)
    except TIMEOUTS:
        return
    raise AssertionError(f"unexpected extra message {msg.data()!r} (id {msg.message_id()})")


def distinct_in_order(consumer, count: int, timeout_s: float = 60.0) -> list[int]:
    """The first ``count`` distinct integer payloads, in arrival order. A send whose receipt was lost in a
    hand-off or restart is resent and may be stored twice (at-least-once without dedup); the repeat comes
    after the original, so it is dropped by keeping only values above the highest seen."""
    seen, highest, dropped = [], -1, []
    while len(seen) < count:
        try:
            v = int(receive_n(consumer, 1, timeout_s=timeout_s)[0].data())
        except AssertionError as exc:
            # Name what came instead: a value dropped below the highest that never came back means the log
            # (or the delivery) was out of order, not that nothing arrived.
            missing = sorted(set(range(count)) - set(seen))[:10]
            raise AssertionError(f"{len(seen)} of {count} distinct values, last {seen[-5:]}; dropped as repeats "
                                 f"{dropped[-10:]} ({len(dropped)} in all); first missing {missing}") from exc
        if v > highest:
            seen.append(v)
            highest = v
        else:
            dropped.append(v)
    return seen


def payloads(messages) -> list[bytes]:
    return [m.data() for m in messages]


class RawConnection:
    """A hand-driven Pulsar connection: send frames, read decoded replies with a deadline."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = FrameDecoder()
        self.frames = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self) -> None:
        self.send(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="raw-test", protocol_version=20))))
        assert self.next().type == T.CONNECTED

    def next(self):
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("broker closed the connection")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0).command

    def closed_by_peer(self) -> bool:
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


def admin_call(broker, method, path, body=None, raw: bytes | None = None):
    """An admin REST call on ``broker``: (HTTP status, the JSON or raw body)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(f"{broker.web_url}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text and resp.headers.get_content_type() == "application/json" else text)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def publish_all(producer, count: int, timeout_s: float = 30.0) -> float:
    """Send ``count`` messages asynchronously; the seconds until every receipt arrived."""
    done, failed, lock = [0], [], threading.Lock()

    def receipt(result, _msg_id):
        with lock:
            done[0] += 1
            if result != pulsar.Result.Ok:
                failed.append(result)

    started = time.monotonic()
    for i in range(count):
        producer.send_async(f"m{i}".encode(), receipt)
    wait_until(lambda: done[0] == count, timeout_s, lambda: f"receipts for {count} messages; have {done[0]}")
    assert failed == []
    return time.monotonic() - started
