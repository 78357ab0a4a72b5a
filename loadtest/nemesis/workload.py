"""The workload: producers, consumers and readers on a few topics, every operation written to the history.

Producers of both clients (the official ``pulsar-client`` and ``magnetar``), batched and unbatched, on plain and
partitioned topics, some on a namespace with deduplication on; consumers of all four subscription types; a
tailing reader; and one single-writer, single-partition topic for the ``--linearizable`` check. Each producer
sends ``"<name>:<seq>"`` at a steady pace with ``send_async`` (at most ``WINDOW`` unanswered), so batching
happens and a fault leaves sends in flight. A send the client answers with an error is ``unknown`` (the message
may have been stored before the error), except the few errors raised before it left.

After the run: ``drain`` lets the consumers catch up, and ``final_reads`` reads every partition from the
earliest position with a fresh reader, the checker's ground truth.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import magnetar
import pulsar

from loadtest.nemesis.history import History, message_id
from storage.testing.waiting import wait_until

NAMESPACE = "public/nemesis"
DEDUP_NAMESPACE = "public/nemesis-dedup"
PARTITIONS = 3
WINDOW = 50  # unanswered sends per producer
SEND_TIMEOUT_MS = 30_000
CLOSE_TIMEOUT_S = 60.0  # producers still flushing after this are left behind (their sends stay unknown)
KEYS = 4  # distinct keys per producer (Key_Shared order is checked per key)
# Answers that prove a message was not stored. Not AlreadyClosed: a producer closed with sends still pending
# answers them AlreadyClosed, and they may have been stored.
DEFINITE = (pulsar.Result.ProducerQueueIsFull, pulsar.Result.InvalidMessage, pulsar.Result.MessageTooBig)


@dataclass(frozen=True)
class ProducerSpec:
    name: str
    topic: str
    api: str  # "pulsar" or "magnetar"
    batched: bool
    dedup: bool = False
    linearizable: bool = False


@dataclass(frozen=True)
class SubscriptionSpec:
    topic: str
    name: str
    sub_type: str  # Exclusive, Failover, Shared, Key_Shared
    consumers: int
    api: str


def topic(name: str, dedup: bool = False) -> str:
    return f"persistent://{DEDUP_NAMESPACE if dedup else NAMESPACE}/{name}"


PLAIN, BATCHED, PARTED, DEDUP, LINEAR = (topic("plain"), topic("batched"), topic("parted"), topic("dedup", True),
                                         topic("linear"))
PARTITIONED = {PARTED: PARTITIONS}
PRODUCERS = [
    ProducerSpec("pu-plain", PLAIN, "pulsar", batched=False),
    ProducerSpec("mu-plain", PLAIN, "magnetar", batched=False),
    ProducerSpec("pb-batched", BATCHED, "pulsar", batched=True),
    ProducerSpec("mb-batched", BATCHED, "magnetar", batched=True),
    ProducerSpec("pb-parted", PARTED, "pulsar", batched=True),
    ProducerSpec("mu-parted", PARTED, "magnetar", batched=False),
    ProducerSpec("pu-dedup", DEDUP, "pulsar", batched=False, dedup=True),
    ProducerSpec("mb-dedup", DEDUP, "magnetar", batched=True, dedup=True),
    ProducerSpec("pu-linear", LINEAR, "pulsar", batched=False, linearizable=True),
]
SUBSCRIPTIONS = [
    SubscriptionSpec(PLAIN, "exclusive", "Exclusive", 1, "pulsar"),
    SubscriptionSpec(PLAIN, "failover", "Failover", 2, "magnetar"),
    SubscriptionSpec(BATCHED, "shared", "Shared", 2, "pulsar"),
    SubscriptionSpec(BATCHED, "key-shared", "Key_Shared", 2, "pulsar"),
    SubscriptionSpec(PARTED, "failover", "Failover", 2, "pulsar"),
    SubscriptionSpec(PARTED, "key-shared", "Key_Shared", 2, "magnetar"),
    SubscriptionSpec(DEDUP, "exclusive", "Exclusive", 1, "magnetar"),
]
API = {"pulsar": pulsar, "magnetar": magnetar}
TYPES = {"Exclusive": "Exclusive", "Failover": "Failover", "Shared": "Shared", "Key_Shared": "KeyShared"}


def _client(api: str, url: str, log_path: str | None = None):
    if api == "pulsar":
        # The official client logs every refused reconnect to stderr; during faults that drowns the report.
        logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, log_path) if log_path else \
            pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        return pulsar.Client(url, operation_timeout_seconds=30, logger=logger)
    return magnetar.Client(url, operation_timeout_seconds=30)


def _admin(web_url: str, method: str, path: str, body=None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{web_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already exists: a replayed setup
            raise


def prepare(web_url: str) -> None:
    """The namespaces (deduplication on for one), and the partitioned topic, through one broker's admin API.
    Retention is infinite: a ledger every subscription has consumed is otherwise deleted, and the final reads
    would miss what it held."""
    for ns in (NAMESPACE, DEDUP_NAMESPACE):
        _admin(web_url, "PUT", f"/admin/v2/namespaces/{ns}")
        _admin(web_url, "POST", f"/admin/v2/namespaces/{ns}/retention",
               {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    _admin(web_url, "POST", f"/admin/v2/namespaces/{DEDUP_NAMESPACE}/deduplication", True)
    for name, count in PARTITIONED.items():
        _admin(web_url, "PUT", f"/admin/v2/persistent/{name.split('://', 1)[1]}/partitions", count)


class _Producer:
    def __init__(self, spec: ProducerSpec, client, history: History, rate_per_s: float, stop: threading.Event):
        self.spec, self.history, self.stop = spec, history, stop
        self.interval_s = 1.0 / rate_per_s
        options = {"batching_enabled": spec.batched, "send_timeout_millis": SEND_TIMEOUT_MS,
                   "block_if_queue_full": True, "max_pending_messages": WINDOW * 2}
        if spec.dedup:
            options["producer_name"] = spec.name  # the broker's dedup state is per producer name
        if spec.batched:
            options["batching_max_publish_delay_ms"] = 5
            # A default batch mixes keys and Key_Shared dispatches a batch by one key: per-key order would break
            # by configuration, not by a fault. Key-based batching keeps one key per batch.
            options["batching_type"] = API[spec.api].BatchingType.KeyBased
        self.producer = client.create_producer(spec.topic, **options)
        self.window = threading.BoundedSemaphore(WINDOW)
        self.thread = threading.Thread(target=self._run, name=spec.name, daemon=True)

    def _run(self) -> None:
        seq = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            if not self.window.acquire(timeout=0.5):
                continue
            value = f"{self.spec.name}:{seq}"
            key = f"{self.spec.name}-k{seq % KEYS}"
            extra = {"dedup": True} if self.spec.dedup else {}
            if self.spec.linearizable:
                extra["linearizable"] = True
            if self.spec.batched:
                extra["order_key"] = key  # key-based batching: order is promised per key
            self.history.record("send", "invoke", self.spec.name, topic=self.spec.topic, value=value, key=key, **extra)
            try:
                self.producer.send_async(value.encode(), self._callback(value), partition_key=key)
            except Exception as exc:  # noqa: BLE001 -- raised before the message left: definitely not stored
                self.history.record("send", "fail", self.spec.name, topic=self.spec.topic, value=value,
                                    error=repr(exc))
                self.window.release()
            seq += 1
            next_at += self.interval_s
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def _callback(self, value: str):
        def done(result, mid) -> None:
            try:
                if result == pulsar.Result.Ok or getattr(result, "name", None) == "Ok":
                    self.history.record("send", "ok", self.spec.name, topic=self.spec.topic, value=value,
                                        id=message_id(mid))
                else:
                    outcome = "fail" if any(result == d or getattr(result, "name", "") == d.name for d in DEFINITE) \
                        else "unknown"
                    self.history.record("send", outcome, self.spec.name, topic=self.spec.topic, value=value,
                                        error=str(result))
            finally:
                self.window.release()
        return done

    def close(self) -> None:
        try:
            self.producer.flush()
            self.producer.close()
        except Exception:  # noqa: BLE001 -- whatever is unanswered stays without an outcome: unknown
            pass


class _Consumer:
    def __init__(self, spec: SubscriptionSpec, index: int, client, history: History, stop: threading.Event):
        self.spec, self.history, self.stop = spec, history, stop
        self.process = f"{spec.api[0]}c-{spec.topic.rsplit('/', 1)[1]}-{spec.name}-{index}"
        api = API[spec.api]
        self.consumer = client.subscribe(spec.topic, spec.name,
                                         consumer_type=getattr(api.ConsumerType, TYPES[spec.sub_type]),
                                         initial_position=api.InitialPosition.Earliest,
                                         consumer_name=self.process)
        self.received: set[str] = set()
        self.thread = threading.Thread(target=self._run, name=self.process, daemon=True)

    def _run(self) -> None:
        common = {"topic": self.spec.topic, "subscription": self.spec.name, "sub_type": self.spec.sub_type}
        while not self.stop.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except Exception as exc:  # noqa: BLE001 -- a timeout (nothing there) or a fault: keep consuming
                if "Timeout" not in type(exc).__name__ and "Timeout" not in str(exc):
                    self.history.record("receive", "fail", self.process, error=repr(exc)[:200], **common)
                    self.stop.wait(0.2)  # back off while the broker recovers
                continue
            value = msg.data().decode(errors="replace")
            fields = {**common, "value": value, "id": message_id(msg.message_id()), "key": msg.partition_key(),
                      "redelivery_count": msg.redelivery_count()}
            self.history.record("receive", "ok", self.process, **fields)
            self.received.add(value)
            try:
                self.consumer.acknowledge(msg)
                self.history.record("ack", "ok", self.process, **fields)
            except Exception as exc:  # noqa: BLE001 -- an ack lost in a fault: the message comes back
                self.history.record("ack", "unknown", self.process, error=repr(exc)[:200], **fields)

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001
            pass


class _Reader:
    """A tailing reader of the linearizable topic: what it reads must never go backwards."""

    def __init__(self, topic_name: str, client, history: History, stop: threading.Event):
        self.topic, self.history, self.stop = topic_name, history, stop
        self.reader = client.create_reader(topic_name, pulsar.MessageId.earliest)
        self.thread = threading.Thread(target=self._run, name="reader", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.reader.read_next(timeout_millis=200)
            except Exception:  # noqa: BLE001 -- nothing new yet, or a fault
                continue
            self.history.record("read", "ok", "reader", topic=self.topic, value=msg.data().decode(errors="replace"),
                                id=message_id(msg.message_id()))

    def close(self) -> None:
        try:
            self.reader.close()
        except Exception:  # noqa: BLE001
            pass


def service_url(urls: list[str], i: int) -> str:
    """One service URL naming every broker (``pulsar://h1:p1,h2:p2``), for client ``i``: both clients take the
    hosts in turn, so the list starts at broker ``i`` to spread the clients' lookups over the brokers."""
    hosts = [u.removeprefix("pulsar://") for u in urls]
    start = i % len(hosts)
    return "pulsar://" + ",".join(hosts[start:] + hosts[:start])


class Workload:
    """Starts everything on ``service_urls``: every client is given all of them (see ``service_url``)."""

    def __init__(self, history: History, service_urls: list[str], rate_per_s: float = 20.0):
        self.history = history
        self.client_log = str(history.path.with_name("pulsar-client.log"))
        self.urls = service_urls
        self.rate = rate_per_s
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.clients: list = []
        self.producers: list[_Producer] = []
        self.consumers: list[_Consumer] = []
        self.reader: _Reader | None = None
        self.stuck_producers: list[str] = []

    def _new_client(self, api: str, i: int):
        client = _client(api, service_url(self.urls, i), self.client_log)
        self.clients.append(client)
        return client

    def start(self) -> None:
        for i, spec in enumerate(SUBSCRIPTIONS):
            client = self._new_client(spec.api, i)
            for n in range(spec.consumers):
                self.consumers.append(_Consumer(spec, n, client, self.history, self.stop_consuming))
        self.reader = _Reader(LINEAR, self._new_client("pulsar", 0), self.history, self.stop_consuming)
        for i, spec in enumerate(PRODUCERS):
            self.producers.append(_Producer(spec, self._new_client(spec.api, i), self.history, self.rate,
                                            self.stop_producing))
        for worker in (*self.consumers, self.reader, *self.producers):
            worker.thread.start()

    def stop_and_drain(self, timeout_s: float = 60.0) -> bool:
        """Stop producing, wait for the last answers, then let consumers catch up with every acknowledged send
        (or the deadline). Records a ``drained`` event per subscription; True if all caught up."""
        self.stop_producing.set()
        for p in self.producers:
            p.thread.join(10)
        # A producer whose sends the broker keeps refusing never finishes flushing (seed 7 hung here on a dedup
        # topic answering "still being stored" for minutes): close each on a thread of its own, with a deadline;
        # what stays unanswered counts as unknown.
        closers = [threading.Thread(target=p.close, daemon=True) for p in self.producers]
        for t in closers:
            t.start()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for t in closers:
            t.join(max(0.0, deadline - time.monotonic()))
        self.stuck_producers = [p.spec.name for p, t in zip(self.producers, closers) if t.is_alive()]
        if self.stuck_producers:
            self.history.record("close", "unknown", "nemesis", producers=self.stuck_producers)
        acked: dict[str, set[str]] = {}
        for e in self.history.events():
            if e["f"] == "send" and e["type"] == "ok":
                acked.setdefault(e["topic"], set()).add(e["value"])

        def caught_up() -> bool:
            for spec in SUBSCRIPTIONS:
                got = set().union(*(c.received for c in self.consumers if c.spec == spec))
                if not acked.get(spec.topic, set()) <= got:
                    return False
            return True

        try:
            wait_until(caught_up, timeout_s, "the consumers to receive every acknowledged send", interval_s=0.2)
            done = True
        except TimeoutError:
            done = False
        self.stop_consuming.set()
        for worker in (*self.consumers, self.reader):
            worker.thread.join(10)
        for spec in SUBSCRIPTIONS:
            self.history.record("drained", "ok", "nemesis", topic=spec.topic, subscription=spec.name)
        for worker in (*self.consumers, self.reader):
            worker.close()
        return done

    def final_reads(self, timeout_s: float = 120.0) -> None:
        """Read every partition of every topic from the earliest position to its end, into the history."""
        client = self._new_client("pulsar", 0)
        for name in sorted({p.topic for p in PRODUCERS}):
            count = PARTITIONED.get(name, 0)
            parts = [(f"{name}-partition-{i}", i) for i in range(count)] if count else [(name, -1)]
            for part_name, index in parts:
                wait_until(lambda: self._read_all(client, name, part_name, index), timeout_s,
                           f"a full read of {part_name}", interval_s=1.0)

    def _read_all(self, client, name: str, part_name: str, index: int) -> bool:
        """One attempt; its events are recorded only when the read reached the end (a retry starts over)."""
        got = []
        try:
            reader = client.create_reader(part_name, pulsar.MessageId.earliest)
            try:
                while reader.has_message_available():
                    msg = reader.read_next(timeout_millis=10_000)
                    got.append((msg.data().decode(errors="replace"), message_id(msg.message_id())))
            finally:
                reader.close()
        except Exception:  # noqa: BLE001 -- the cluster is still settling: read again from the start
            return False
        for value, mid in got:
            mid[3] = index
            self.history.record("final-read", "ok", "final", topic=name, value=value, id=mid)
        return True

    def close(self) -> None:
        """Stop every worker (also after a failed run, before the history closes), then the clients."""
        self.stop_producing.set()
        self.stop_consuming.set()
        for worker in (*self.producers, *self.consumers, *([self.reader] if self.reader else [])):
            if worker.thread.is_alive():
                worker.thread.join(10)

        def close_quietly(client) -> None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

        # A client closes its producers first, which waits for their unanswered sends: not forever.
        closers = [threading.Thread(target=close_quietly, args=(c,), daemon=True) for c in self.clients]
        for t in closers:
            t.start()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for t in closers:
            t.join(max(0.0, deadline - time.monotonic()))
