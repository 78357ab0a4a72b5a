"""Random sequences of well-formed Pulsar commands against a real `broker standalone` (issue 18, session fuzzing).

A Hypothesis state machine drives one raw connection with commands whose fields are drawn at random: ids that
exist and ids that don't, the edges of each integer type (0, 2^31-1, 2^32-1, 2^63, 2^64-1, negative int32s),
repeated request ids, lifecycles out of order (SEND before PRODUCER, ACK and SEEK for unknown consumers, FLOW
with 2^32-1 permits), bad and odd topic names. After every step:

* the command's answer (if it has one) is a success or a refusal with a specific ServerError code and a
  message; a command without an answer is followed by a PING that must be PONGed;
* the connection stays up, except after a ServiceNotReady refusal of PRODUCER/SUBSCRIBE (the broker closes so
  the client looks the topic up again) or a second CONNECT (which Pulsar answers by closing);
* every few steps, and at the end of each sequence, a well-behaved official-client producer and consumer on
  their own topic still publish and receive;
* at the end of each sequence the broker's log shows no traceback and no "unexpected error".

The bounded variant runs in `make test`; the ``slow`` one (`make test-slow`) runs many more sequences.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pulsar
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_headers_and_payload, pack_batch
from tests.official_client.session_fuzz_support import Closed, Wire, reply_problem
from tests.official_client.support import receive_n

T = pb.BaseCommand
GOOD_CLIENT_EVERY = 8  # steps between checks that the well-behaved client still works

U64_EDGES = [0, 1, 2, 3, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]
U32_EDGES = [0, 1, 2, 1000, 2**31 - 1, 2**32 - 1]
I32_EDGES = [-(2**31), -1, 0, 1, 2, 63, 64, 65535, 65536, 2**31 - 1]
I64_EDGES = [-(2**63), -1, 0, 1, 2**62, 2**63 - 1]

u64 = st.one_of(st.sampled_from(U64_EDGES), st.integers(0, 2**64 - 1))
u32 = st.one_of(st.sampled_from(U32_EDGES), st.integers(0, 2**32 - 1))
i32 = st.one_of(st.sampled_from(I32_EDGES), st.integers(-(2**31), 2**31 - 1))
i64 = st.one_of(st.sampled_from(I64_EDGES), st.integers(-(2**63), 2**63 - 1))
# Few handle ids, so creates and later commands meet; and the far end of the type.
handle_ids = st.one_of(st.integers(0, 3), st.sampled_from([2**63, 2**64 - 1]))
names = st.one_of(st.sampled_from(["", "a", "sub", "x" * 300]), st.text(max_size=20))
key_values = st.lists(st.builds(pb.KeyValue, key=st.text(max_size=10), value=st.text(max_size=20)), max_size=3)
BAD_TOPICS = [
    "", "persistent://", "persistent://public/default/", "persistent://public/default/a/b",
    "persistent://nosuchtenant/default/t", "persistent://public/nosuchns/t", "non-persistent://public/default/np",
    "public/default/short", "persistent://public/default/t-partition-99999999999", "persistent://public/default/\x00",
    "persistent://public/default/" + "y" * 5000, "persistent://public/default/ü-t", "ftp://public/default/t",
]
NAMESPACES = ["public/default", "", "public", "nosuchtenant/ns", "public/default/extra", "a" * 1000]


class SessionMachine(RuleBasedStateMachine):
    """One raw connection per example; the test sets ``broker``, ``topics``, ``good`` and ``seen`` on a subclass."""

    broker = None
    topics: list[str] = []
    good = None
    seen: Counter = Counter()  # replies and unsolicited frames by type, over the whole run

    def __init__(self):
        super().__init__()
        self.wire: Wire | None = None
        self.producers: dict[int, str] = {}
        self.consumers: dict[int, str] = {}
        self.positions: set[tuple[int, int]] = set()  # published or dispatched (ledger, entry)
        self.request_ids = [0]
        self.steps = 0
        self.closed_may_follow = False  # the last answer allows the broker to close the connection
        self.log_start = self.broker.log_path.stat().st_size

    # ---- plumbing ------------------------------------------------------------------

    def _open(self) -> None:
        if self.wire is not None:
            self.wire.close()
        self.wire = Wire(self.broker.port)
        self.wire.connect()
        self.producers.clear()
        self.consumers.clear()

    def _request_id(self, data) -> int:
        if data.draw(st.booleans(), label="repeat a request id"):
            return data.draw(st.sampled_from(self.request_ids), label="repeated request id")
        rid = data.draw(st.one_of(st.just(len(self.request_ids)), u64), label="request id")
        self.request_ids.append(rid)
        return rid

    def _handle(self, data, known: dict, label: str) -> int:
        """An id that is open on this connection half the time (when there is one), any id otherwise."""
        # The same draws whatever the broker answered before, so Hypothesis can replay a sequence.
        use_open = data.draw(st.booleans(), label=f"open {label}")
        index = data.draw(st.integers(0, 7), label=f"open {label} index")
        other = data.draw(handle_ids, label=label)
        return sorted(known)[index % len(known)] if known and use_open else other

    def _topic(self, data) -> str:
        return data.draw(st.one_of(st.sampled_from(self.topics), st.sampled_from(self.topics),
                                   st.sampled_from(BAD_TOPICS), st.text(max_size=20)), label="topic")

    def _message_id(self, data) -> pb.MessageIdData:
        known = sorted(self.positions)
        use_known = data.draw(st.booleans(), label="known position")
        index = data.draw(st.integers(0, 63), label="position index")
        offset = data.draw(st.sampled_from([0, 0, 1, -1, 1000]), label="entry offset")
        ledger, entry = data.draw(u64, label="ledger"), data.draw(u64, label="entry")
        if known and use_known:
            ledger, entry = known[index % len(known)]
            entry = max(entry + offset, 0)
        mid = pb.MessageIdData(ledgerId=ledger, entryId=entry)
        if data.draw(st.booleans(), label="batch fields"):
            mid.batch_index = data.draw(i32, label="batch index")
            mid.batch_size = data.draw(i32, label="batch size")
            mid.ack_set.extend(data.draw(st.lists(i64, max_size=3), label="ack set"))
        if data.draw(st.booleans(), label="partition"):
            mid.partition = data.draw(i32, label="partition")
        return mid

    def _expect(self, reply, closing_codes=()) -> None:
        self.seen[T.Type.Name(reply.type)] += 1
        problem = reply_problem(reply)
        assert problem is None, f"{problem}\nreply: {reply}"
        self.closed_may_follow = reply.type == T.ERROR and reply.error.error in closing_codes
        self._note_unsolicited()

    def _note_unsolicited(self) -> None:
        for frame in self.wire.unsolicited:
            c = frame.command
            self.seen[T.Type.Name(c.type)] += 1
            if c.type == T.MESSAGE:
                self.positions.add((c.message.message_id.ledgerId, c.message.message_id.entryId))
            elif c.type == T.CLOSE_CONSUMER:
                self.consumers.pop(c.close_consumer.consumer_id, None)
            elif c.type == T.CLOSE_PRODUCER:
                self.producers.pop(c.close_producer.producer_id, None)
            else:
                problem = reply_problem(c)
                assert problem is None, f"{problem}\nunsolicited frame: {c}"
        self.wire.unsolicited.clear()

    def _do(self, step) -> None:
        """Run a step; a closed connection is allowed only where the last answer allows it, then reopen."""
        self.steps += 1
        try:
            step()
        except Closed:
            assert self.closed_may_follow, f"the broker closed the connection (last answer did not allow it)"
            self._open()
            self.closed_may_follow = False

    # ---- lifecycle -----------------------------------------------------------------

    @initialize()
    def connect(self):
        self._open()

    def teardown(self):
        if self.wire is not None:
            self.wire.close()
        self.good()
        self.broker_logged_no_error()

    @invariant()
    def good_client_works(self):
        if self.steps and self.steps % GOOD_CLIENT_EVERY == 0:
            self.good()

    @invariant()
    def broker_logged_no_error(self):
        with open(self.broker.log_path, "rb") as f:
            f.seek(self.log_start)
            log = f.read().decode(errors="replace")
        for marker in ("Traceback", "unexpected error"):
            assert marker not in log, f"the broker logged {marker!r}:\n{log[max(0, log.index(marker) - 2000):][:6000]}"

    # ---- producers -----------------------------------------------------------------

    @rule(data=st.data(), producer_id=handle_ids, mode=st.sampled_from([None, 0, 1, 2, 3]))
    def producer(self, data, producer_id, mode):
        rid = self._request_id(data)
        topic = self._topic(data)
        c = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=rid)
        if data.draw(st.booleans(), label="named"):
            c.producer_name = data.draw(names, label="producer name")
        if mode is not None:
            c.producer_access_mode = mode
        if data.draw(st.booleans(), label="epoch"):
            c.topic_epoch = data.draw(u64, label="topic epoch")
        c.metadata.extend(data.draw(key_values, label="metadata"))
        c.user_provided_producer_name = data.draw(st.booleans(), label="user provided name")
        then_send = data.draw(st.booleans(), label="SEND at once")

        def step():
            reply = self.wire.request(command(T.PRODUCER, producer=c), rid)
            self._expect(reply, closing_codes=(pb.ServiceNotReady,))
            if reply.type == T.PRODUCER_SUCCESS:
                self.producers[producer_id] = topic
                if then_send and reply.producer_success.producer_ready:
                    metadata = pb.MessageMetadata(producer_name="fuzz", sequence_id=rid, publish_time=1)
                    receipt = self.wire.send_message(command(T.SEND, send=pb.CommandSend(
                        producer_id=producer_id, sequence_id=rid)), encode_headers_and_payload(metadata, b"m"))
                    self._expect(receipt)
                    if receipt.type == T.SEND_RECEIPT:
                        self.positions.add((receipt.send_receipt.message_id.ledgerId,
                                            receipt.send_receipt.message_id.entryId))
        self._do(step)

    @rule(data=st.data(), sequence_id=u64, payload=st.binary(max_size=64))
    def send(self, data, sequence_id, payload):
        producer_id = self._handle(data, self.producers, "producer id")
        send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
        metadata = pb.MessageMetadata(producer_name="fuzz", sequence_id=sequence_id, publish_time=1)
        kind = data.draw(st.sampled_from(["plain", "batch", "poison"]), label="payload kind")
        if kind == "batch":
            count = data.draw(st.integers(1, 5), label="batch count")
            payload = pack_batch([(pb.SingleMessageMetadata(payload_size=0), payload) for _ in range(count)])
            send.num_messages = count
            metadata.num_messages_in_batch = count
        elif kind == "poison":
            send.num_messages = data.draw(i32, label="num messages")
            metadata.num_messages_in_batch = data.draw(i32, label="num messages in batch")
        if data.draw(st.booleans(), label="highest sequence id"):
            send.highest_sequence_id = data.draw(u64, label="highest")
        if data.draw(st.booleans(), label="deliver at"):
            metadata.deliver_at_time = data.draw(i64, label="deliver at time")
        section = encode_headers_and_payload(metadata, payload)
        if data.draw(st.integers(0, 9), label="corrupt") == 0:
            section = section[:2] + bytes([section[2] ^ 0xFF]) + section[3:]  # a wrong CRC32C

        def step():
            reply = self.wire.send_message(command(T.SEND, send=send), section)
            self._expect(reply)
            if reply.type == T.SEND_RECEIPT:
                mid = reply.send_receipt.message_id
                if mid.ledgerId < 2**63:
                    self.positions.add((mid.ledgerId, mid.entryId))
        self._do(step)

    @rule(data=st.data(), producer_id=handle_ids)
    def close_producer(self, data, producer_id):
        rid = self._request_id(data)

        def step():
            reply = self.wire.request(command(T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                producer_id=producer_id, request_id=rid)), rid)
            self._expect(reply)
            self.producers.pop(producer_id, None)
        self._do(step)

    # ---- consumers -----------------------------------------------------------------

    @rule(data=st.data(), consumer_id=handle_ids, sub_type=st.sampled_from([0, 1, 2, 3]))
    def subscribe(self, data, consumer_id, sub_type):
        rid = self._request_id(data)
        topic = self._topic(data)
        c = pb.CommandSubscribe(topic=topic, subscription=data.draw(st.one_of(st.sampled_from(["s1", "s2"]), names),
                                                                    label="subscription"),
                                subType=sub_type, consumer_id=consumer_id, request_id=rid,
                                initialPosition=data.draw(st.sampled_from([0, 1]), label="initial position"))
        if data.draw(st.booleans(), label="priority"):
            c.priority_level = data.draw(i32, label="priority level")
        if data.draw(st.booleans(), label="durable given"):
            c.durable = data.draw(st.booleans(), label="durable")
        if data.draw(st.booleans(), label="start id"):
            c.start_message_id.CopyFrom(self._message_id(data))
        if data.draw(st.booleans(), label="key shared meta"):
            c.keySharedMeta.keySharedMode = data.draw(st.sampled_from([0, 1]), label="key shared mode")
            for start, end in data.draw(st.lists(st.tuples(i32, i32), max_size=4), label="hash ranges"):
                c.keySharedMeta.hashRanges.add(start=start, end=end)
        if data.draw(st.booleans(), label="force creation given"):
            c.force_topic_creation = data.draw(st.booleans(), label="force creation")
        c.metadata.extend(data.draw(key_values, label="metadata"))
        c.subscription_properties.extend(data.draw(key_values, label="subscription properties"))
        if data.draw(st.booleans(), label="consumer name"):
            c.consumer_name = data.draw(names, label="name")
        then_flow = data.draw(st.booleans(), label="FLOW at once, as clients do")

        def step():
            reply = self.wire.request(command(T.SUBSCRIBE, subscribe=c), rid)
            self._expect(reply, closing_codes=(pb.ServiceNotReady,))
            if reply.type == T.SUCCESS:
                self.consumers[consumer_id] = topic
                if then_flow:
                    self.wire.unanswered(command(T.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id,
                                                                             messagePermits=1000)))
                    self._note_unsolicited()
        self._do(step)

    @rule(data=st.data(), permits=st.one_of(st.just(1000), u32))
    def flow(self, data, permits):
        consumer_id = self._handle(data, self.consumers, "consumer id")
        self._do(lambda: self.wire.unanswered(command(T.FLOW, flow=pb.CommandFlow(
            consumer_id=consumer_id, messagePermits=permits))) or self._note_unsolicited())

    @rule(data=st.data(), cumulative=st.booleans())
    def ack(self, data, cumulative):
        consumer_id = self._handle(data, self.consumers, "consumer id")
        c = pb.CommandAck(consumer_id=consumer_id,
                          ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual)
        for _ in range(data.draw(st.integers(0, 3), label="ids")):
            c.message_id.append(self._message_id(data))
        if data.draw(st.booleans(), label="validation error"):
            c.validation_error = data.draw(st.integers(0, 4), label="validation")
        if data.draw(st.integers(0, 4), label="txn") == 0:
            c.txnid_most_bits, c.txnid_least_bits = data.draw(u64, label="txn most"), data.draw(u64, label="txn least")
        with_request = data.draw(st.booleans(), label="with request id")
        rid = self._request_id(data) if with_request else None
        if rid is not None:
            c.request_id = rid

        def step():
            cmd = command(T.ACK, ack=c)
            if rid is None:
                self.wire.unanswered(cmd)
                self._note_unsolicited()
            else:
                self._expect(self.wire.request(cmd, rid))
        self._do(step)

    @rule(data=st.data())
    def redeliver(self, data):
        consumer_id = self._handle(data, self.consumers, "consumer id")
        c = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
        for _ in range(data.draw(st.integers(0, 3), label="ids")):
            c.message_ids.append(self._message_id(data))
        self._do(lambda: self.wire.unanswered(command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                                                      redeliverUnacknowledgedMessages=c)) or self._note_unsolicited())

    @rule(data=st.data(), which=st.sampled_from(
        ["unsubscribe", "close", "seek-id", "seek-time", "seek-nothing", "last-id", "stats"]))
    def consumer_request(self, data, which):
        consumer_id = self._handle(data, self.consumers, "consumer id")
        rid = self._request_id(data)
        if which == "unsubscribe":
            cmd = command(T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(
                consumer_id=consumer_id, request_id=rid, force=data.draw(st.booleans(), label="force")))
        elif which == "close":
            cmd = command(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=rid))
        elif which.startswith("seek"):
            seek = pb.CommandSeek(consumer_id=consumer_id, request_id=rid)
            if which == "seek-id":
                seek.message_id.CopyFrom(self._message_id(data))
            elif which == "seek-time":
                seek.message_publish_time = data.draw(u64, label="publish time")
            cmd = command(T.SEEK, seek=seek)
        elif which == "last-id":
            cmd = command(T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
                consumer_id=consumer_id, request_id=rid))
        else:
            cmd = command(T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(consumer_id=consumer_id, request_id=rid))

        def step():
            reply = self.wire.request(cmd, rid)
            self._expect(reply)
            if reply.type == T.SUCCESS and which in ("unsubscribe", "close"):
                self.consumers.pop(consumer_id, None)
        self._do(step)

    # ---- lookups and the rest ------------------------------------------------------

    @rule(data=st.data(), which=st.sampled_from(["lookup", "partitions", "namespace", "schema"]))
    def lookup(self, data, which):
        rid = self._request_id(data)
        topic = self._topic(data)
        if which == "lookup":
            c = pb.CommandLookupTopic(topic=topic, request_id=rid, authoritative=data.draw(st.booleans(), label="auth"))
            if data.draw(st.booleans(), label="listener"):
                c.advertised_listener_name = data.draw(names, label="listener name")
            cmd = command(T.LOOKUP, lookupTopic=c)
        elif which == "partitions":
            cmd = command(T.PARTITIONED_METADATA, partitionMetadata=pb.CommandPartitionedTopicMetadata(
                topic=topic, request_id=rid))
        elif which == "namespace":
            cmd = command(T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
                request_id=rid, namespace=data.draw(st.one_of(st.sampled_from(NAMESPACES), st.text(max_size=20)),
                                                    label="namespace"),
                mode=data.draw(st.sampled_from([0, 1, 2]), label="mode")))
        else:
            cmd = command(T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=rid, topic=topic))
        self._do(lambda: self._expect(self.wire.request(cmd, rid)))

    @rule()
    def ping(self):
        self._do(lambda: self.wire.ping() or self._note_unsolicited())

    @rule(data=st.data())
    def get_or_create_schema(self, data):
        """A valid or invalid schema: answered by request id either way (a version or an error code)."""
        rid = self._request_id(data)
        schema_data = data.draw(st.sampled_from([b"{}", b'{"type": "record", "name": "R", "fields": []}', b"x"]),
                                label="schema")
        cmd = command(T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=rid, topic=self._topic(data), schema=pb.Schema(name="s", schema_data=schema_data,
                                                                      type=pb.Schema.Json)))
        self._do(lambda: self._expect(self.wire.request(cmd, rid)))

    @precondition(lambda self: self.steps > 0)
    @rule()
    def second_connect(self):
        """Pulsar closes the connection on a second CONNECT; staying up (and ignoring it) is allowed too."""
        self.closed_may_follow = True
        self._do(lambda: self.wire.unanswered(command(T.CONNECT, connect=pb.CommandConnect(
            client_version="again", protocol_version=20))))
        self.closed_may_follow = False


@pytest.fixture(scope="module")
def good(standalone):
    """A well-behaved official-client producer and consumer; calling it checks a message goes round."""
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    topic = f"persistent://public/default/session-fuzz-good-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "good")
    sent = iter(range(10**9))

    def check():
        payload = f"good-{next(sent)}".encode()
        producer.send(payload)
        assert receive_n(consumer, 1, timeout_s=10)[0].data() == payload

    yield check
    client.close()


def _run(standalone, good, examples: int, steps: int, shrink: bool, derandomize: bool = False) -> None:
    topics = [f"persistent://public/default/session-fuzz-{i}-{uuid.uuid4().hex[:8]}" for i in range(2)]
    seen = Counter()
    machine = type("Machine", (SessionMachine,), {"broker": standalone, "topics": topics, "good": staticmethod(good),
                                                  "seen": seen})
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None, phases=phases,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck)))
    print(f"frames received by type: {dict(seen.most_common())}")
    # The sequences reached the broker's real work, not only its refusals.
    for kind in ("PRODUCER_SUCCESS", "SEND_RECEIPT", "SEND_ERROR", "SUCCESS", "ERROR", "MESSAGE", "LOOKUP_RESPONSE"):
        assert seen[kind] > 0, f"no {kind} in {examples} sequences: {dict(seen)}"


def test_random_command_sequences_are_answered_and_harm_no_one(standalone, good):
    # Unshrunk: a failure prints its whole (short) sequence at once instead of minutes of shrinking on a
    # real broker; the long mode shrinks. Derandomized: the same 60 sequences every run, so the check that they
    # reached every kind of answer cannot fail by the luck of the draw (a random draw once produced no MESSAGE);
    # the long mode draws new ones.
    _run(standalone, good, examples=60, steps=40, shrink=False, derandomize=True)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_random_command_sequences_long(standalone, good):
    _run(standalone, good, examples=400, steps=60, shrink=True)


# ---- sequences the machine found, replayed as plain tests ---------------------------------------------------


def _subscribe_cmd(topic: str, consumer_id: int, request_id: int, sub_type: int, **fields):
    return command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="s1", subType=sub_type, consumer_id=consumer_id, request_id=request_id,
        initialPosition=pb.CommandSubscribe.Earliest, **fields))


def test_a_topic_named_beyond_the_int32_partition_range_is_delivered(standalone, good):
    """Found by the machine: "...-partition-99999999999" was read as partition 99999999999, which no
    MessageIdData can carry, so every dispatch to its consumers failed. Pulsar reads it as a topic of its own."""
    topic = f"persistent://public/default/big-{uuid.uuid4().hex[:8]}-partition-99999999999"
    wire = Wire(standalone.port)
    wire.connect()
    assert wire.request(_subscribe_cmd(topic, 1, 1, pb.CommandSubscribe.Shared), 1).type == T.SUCCESS
    assert wire.request(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=2)),
                        2).type == T.PRODUCER_SUCCESS
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    receipt = wire.send_message(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0)),
                                encode_headers_and_payload(metadata, b"hello"))
    assert receipt.type == T.SEND_RECEIPT
    wire.send(command(T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=10)))
    message = wire.wait_for(T.MESSAGE).message
    assert message.message_id.partition == -1
    wire.close()
    good()


def test_key_shared_consumers_of_different_modes_are_refused_not_crashed(standalone, good):
    """Found by the machine: a Key_Shared AUTO_SPLIT consumer joining a subscription whose consumers are STICKY
    (or the reverse) crashed the handler (UnknownError). Pulsar answers ConsumerBusy; with no consumer left,
    the subscription takes the newcomer's mode."""
    topic = f"persistent://public/default/ks-modes-{uuid.uuid4().hex[:8]}"
    wire = Wire(standalone.port)
    wire.connect()
    sticky = pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=65535)])
    auto = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)
    key_shared = pb.CommandSubscribe.Key_Shared
    for first, second in ((sticky, auto), (auto, sticky)):
        assert wire.request(_subscribe_cmd(topic, 1, 1, key_shared, keySharedMeta=first), 1).type == T.SUCCESS
        for meta in (second, None):
            kwargs = {"keySharedMeta": meta} if meta is not None else {}
            if meta is None and first is auto:
                continue  # no meta is AUTO_SPLIT: it may join
            reply = wire.request(_subscribe_cmd(topic, 2, 2, key_shared, **kwargs), 2)
            assert reply.type == T.ERROR and reply.error.error == pb.ConsumerBusy, reply
            assert "AUTO_SPLIT" in reply.error.message and "STICKY" in reply.error.message
        assert wire.request(command(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
            consumer_id=1, request_id=3)), 3).type == T.SUCCESS
        # Nobody left: the other mode is welcome now.
        assert wire.request(_subscribe_cmd(topic, 2, 4, key_shared, keySharedMeta=second), 4).type == T.SUCCESS
        assert wire.request(command(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
            consumer_id=2, request_id=5)), 5).type == T.SUCCESS
    wire.close()
    good()
