"""A client that never reads the broker's replies cannot grow the broker's outbound buffer
(pulsarChannelPauseReceivingRequestsIfUnwritable): over the high-water mark of unsent replies, the broker stops
reading that connection until the client takes them. Other clients are unaffected; nothing is dropped."""

from __future__ import annotations

import re
import select
import socket
import threading
import time
import urllib.request

import pulsar

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from storage.testing.waiting import wait_until
from tests.official_client.support import RawConnection, receive_n

T = pb.BaseCommand
SENDS = 250_000  # ~10 MB of SEND frames; each is answered with a SEND_ERROR of about the same size


def _metric(broker, name: str) -> float:
    with urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def _flood(sock, data: bytes, stalled_s: float = 2.0) -> int:
    """Send ``data`` without reading anything; returns how many bytes went before the socket stayed full for
    ``stalled_s`` (the broker stopped reading), or len(data)."""
    sock.setblocking(False)
    view, sent = memoryview(data), 0
    while sent < len(data):
        _, writable, _ = select.select([], [sock], [], stalled_s)
        if not writable:
            break
        try:
            sent += sock.send(view[sent:sent + 65536])
        except BlockingIOError:
            continue
    sock.setblocking(True)
    return sent


def test_a_client_that_never_reads_its_replies_is_paused_not_buffered(start_standalone, topic):
    # The command budget would slow this flood of refused SENDs down on its own (broker/server/command_budget.py);
    # off, what bounds the broker is the outbound pause alone.
    standalone = start_standalone(env={"MAGNETAR_BROKER_MAX_WASTED_COMMANDS_PER_CONNECTION_PER_S": "0"})
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    attacker = RawConnection(standalone.port)
    attacker.connect()
    # What the kernel takes off the broker's hands is not the broker's memory; keep it small so the broker's own
    # buffer is what the test sees.
    attacker.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    metadata = pb.MessageMetadata(producer_name="nobody", sequence_id=0, publish_time=1)
    # SENDs for a producer that does not exist: each one costs the broker a SEND_ERROR reply.
    flood = b"".join(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=99, sequence_id=i)),
                                            metadata, b"x") for i in range(SENDS))
    sent = _flood(attacker.sock, flood)
    wait_until(lambda: _metric(standalone, "pulsar_connection_write_buffer_max_bytes") > 0, 30,
               "the broker to hold replies for the attacker")
    # Watched for a while (the claim is that it stays so). The bound is the high-water mark (64 KiB) plus the
    # replies to one read's frames; unbounded, it was the flood's worth less what the kernel took (~7 MB).
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        buffered = _metric(standalone, "pulsar_connection_write_buffer_max_bytes")
        assert buffered < 512 * 1024, f"{buffered:.0f} reply bytes buffered for a client that reads nothing"

    # Another client is served meanwhile.
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "good", initial_position=pulsar.InitialPosition.Earliest)
    start = time.monotonic()
    producer.send(b"unaffected")
    assert time.monotonic() - start < 2
    assert receive_n(consumer, 1)[0].data() == b"unaffected"

    # Once the attacker reads, everything it sent is answered, in order: paused, never dropped.
    replies: list[int] = []
    done = threading.Event()

    others: list[int] = []

    def drain():
        while not done.is_set():
            reply = attacker.next()
            if reply.type == T.PONG:
                done.set()
            elif reply.type == T.SEND_ERROR:
                replies.append(reply.send_error.sequence_id)
            else:
                others.append(reply.type)  # the broker's keep-alive PING, after 30 s on a slow machine

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    attacker.sock.settimeout(60)
    attacker.sock.sendall(flood[sent:] + encode_command(command(T.PING, ping=pb.CommandPing())))
    reader.join(timeout=240)  # a deadline for a loaded machine; it takes ~15 s on an idle one
    assert done.is_set(), f"{len(replies)} of {SENDS} replies before the deadline"
    assert replies == list(range(SENDS))
    assert set(others) <= {T.PING}, others
    attacker.close()
    client.close()
