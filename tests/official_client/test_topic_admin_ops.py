"""Admin operations on a subscription's backlog and on topics, through REST, with the official client as the
consumer and producer: peek, skip, skip_all (clear-backlog), expireMessages, terminate, delete with force,
internal-info, backlog, partitioned-stats, namespace unload / clearBacklog / topics, brokers and bookies."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pulsar
import pytest

from storage.testing.waiting import wait_until
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command
from tests.official_client.support import RawConnection, admin_call as call, receive_n

T = pb.BaseCommand


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def backlog(broker, topic: str, sub: str) -> int:
    return call(broker, "GET", _path(topic) + "/stats")[1]["subscriptions"][sub]["msgBacklog"]


def peek(broker, topic: str, sub: str, n: int):
    url = f"{broker.web_url}{_path(topic)}/subscription/{sub}/position/{n}"
    with urllib.request.urlopen(url, timeout=15) as resp:
        return resp.read(), resp.headers


def fill(client, topic: str, count: int, properties=None) -> list:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties=properties or {}) for i in range(count)]
    producer.close()
    return ids


def test_peek_shows_the_nth_unconsumed_message_without_consuming_it(standalone, client, topic):
    client.subscribe(topic, "s").close()
    ids = fill(client, topic, 5, {"trace": "t-1"})
    body, headers = peek(standalone, topic, "s", 3)
    assert body == b"m2"
    assert headers["X-Pulsar-Message-ID"] == f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"trace": "t-1"}
    assert headers["X-Pulsar-PROPERTY-trace"] == "t-1" and headers["X-Pulsar-publish-time"]
    assert backlog(standalone, topic, "s") == 5  # peeking consumed nothing
    status, answer = call(standalone, "GET", _path(topic) + "/subscription/s/position/6")
    assert status == 404 and "fewer than 6" in answer["reason"]
    status, answer = call(standalone, "GET", _path(topic) + "/subscription/s/position/0")
    assert status == 400
    assert call(standalone, "GET", _path(topic) + "/subscription/nope/position/1")[0] == 404


def test_peek_jumps_over_individually_acknowledged_messages(standalone, client, topic):
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    fill(client, topic, 4)
    received = receive_n(consumer, 4, ack=False)
    consumer.acknowledge(received[0])
    consumer.acknowledge(received[2])
    wait_until(lambda: backlog(standalone, topic, "s") == 2, 10, "the acks to land")
    assert peek(standalone, topic, "s", 1)[0] == b"m1"
    assert peek(standalone, topic, "s", 2)[0] == b"m3"


def test_skip_and_skip_all_move_the_subscription_on(standalone, client, topic):
    client.subscribe(topic, "s").close()
    fill(client, topic, 10)
    assert call(standalone, "POST", _path(topic) + "/subscription/s/skip/3")[0] == 204
    assert backlog(standalone, topic, "s") == 7
    consumer = client.subscribe(topic, "s")
    assert receive_n(consumer, 1)[0].data() == b"m3"  # the first three were skipped
    consumer.close()
    assert call(standalone, "POST", _path(topic) + "/subscription/s/skip_all")[0] == 204
    assert backlog(standalone, topic, "s") == 0
    assert call(standalone, "POST", _path(topic) + "/subscription/s/skip/many")[0] == 400


def test_skip_all_with_a_consumer_connected_delivers_only_new_messages(standalone, client, topic):
    consumer = client.subscribe(topic, "s", receiver_queue_size=1)
    fill(client, topic, 20)
    assert call(standalone, "POST", _path(topic) + "/subscription/s/skip_all")[0] == 204
    assert backlog(standalone, topic, "s") == 0
    client.create_producer(topic).send(b"after")
    seen = []
    wait_until(lambda: seen.append(receive_n(consumer, 1)[0].data()) or seen[-1] == b"after", 20,
               "the new message to arrive")
    assert len(seen) <= 3  # at most what the consumer held already (its queue), never the cleared backlog


def test_expire_messages_consumes_those_older_than_the_given_age(standalone, client, topic):
    client.subscribe(topic, "s").close()
    client.subscribe(topic, "other").close()
    fill(client, topic, 3)
    time.sleep(1.5)  # the messages must be older than the 1 s asked for; a real age, not synchronisation
    fill(client, topic, 2)
    assert call(standalone, "POST", _path(topic) + "/subscription/s/expireMessages/1")[0] == 204
    assert backlog(standalone, topic, "s") == 2
    assert backlog(standalone, topic, "other") == 5  # one subscription only
    assert call(standalone, "POST", _path(topic) + "/all_subscription/expireMessages/1")[0] == 204
    assert backlog(standalone, topic, "other") == 2
    assert call(standalone, "POST", _path(topic) + "/subscription/s/expireMessages/3600")[0] == 204
    assert backlog(standalone, topic, "s") == 2  # none is an hour old


def test_terminate_ends_the_topic_for_consumers_and_producers(standalone, client, topic):
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    last = [producer.send(f"m{i}".encode()) for i in range(3)][-1]
    status, answer = call(standalone, "POST", _path(topic) + "/terminate")
    assert status == 200 and (answer["ledgerId"], answer["entryId"]) == (last.ledger_id(), last.entry_id())
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"too late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    receive_n(consumer, 3)
    assert consumer.is_connected()  # the C++ client is not sent REACHED_END_OF_TOPIC, which it cannot parse
    assert call(standalone, "GET", _path(topic) + "/internalStats")[1]["state"] == "Terminated"
    info = call(standalone, "GET", _path(topic) + "/internal-info")[1]
    assert info["terminatedPosition"] == {"ledgerId": last.ledger_id(), "entryId": last.entry_id()}

    # Termination is stored: it outlives an unload.
    assert call(standalone, "PUT", _path(topic) + "/unload")[0] == 204
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    receive_n(late, 3)


def test_a_terminated_topic_tells_its_consumers_when_they_reach_the_end(standalone, client, topic):
    """On the wire: REACHED_END_OF_TOPIC once the consumer has been sent everything (the Java and Go clients
    act on it), both for a consumer connected at termination and for one subscribing afterwards."""
    client.subscribe(topic, "s").close()
    fill(client, topic, 2)
    assert call(standalone, "POST", _path(topic) + "/terminate")[0] == 200
    for sub, consumer_id in (("s", 1), ("new", 2)):
        raw = RawConnection(standalone.port)
        try:
            raw.connect()
            raw.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
                topic=topic, subscription=sub, subType=pb.CommandSubscribe.Exclusive, consumer_id=consumer_id,
                request_id=1, initialPosition=pb.CommandSubscribe.Earliest))))
            assert raw.next().type == T.SUCCESS
            raw.send(encode_command(command(T.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=10))))
            kinds = [raw.next().type for _ in range(3)]
            assert kinds == [T.MESSAGE, T.MESSAGE, T.REACHED_END_OF_TOPIC], kinds
        finally:
            raw.close()


def test_terminate_partitions_terminates_every_partition(standalone, client):
    base = f"persistent://public/default/terminate-parts-{uuid.uuid4().hex[:6]}"
    assert call(standalone, "PUT", _path(base) + "/partitions", 3)[0] == 204
    last = {}
    for i in (0, 2):  # partition 1 gets nothing: an empty partition is terminated too
        producer = client.create_producer(f"{base}-partition-{i}", batching_enabled=False)
        last[i] = [producer.send(f"m{n}".encode()) for n in range(2)][-1]
    status, answer = call(standalone, "POST", _path(base) + "/terminate/partitions")
    assert status == 200 and sorted(answer) == ["0", "1", "2"], answer
    for i in (0, 2):
        assert answer[str(i)] == {"ledgerId": last[i].ledger_id(), "entryId": last[i].entry_id(), "partitionIndex": i}
    assert answer["1"]["partitionIndex"] == 1 and answer["1"]["entryId"] == -1
    for i in range(3):
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(f"{base}-partition-{i}")
        assert call(standalone, "GET", _path(f"{base}-partition-{i}") + "/internalStats")[1]["state"] == "Terminated"
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(base)  # the partitioned topic as a whole
    # Again: the same positions (termination is idempotent).
    assert call(standalone, "POST", _path(base) + "/terminate/partitions") == (200, answer)


def test_terminate_partitions_of_a_topic_that_is_not_partitioned(standalone, client, topic):
    client.create_producer(topic).close()
    status, answer = call(standalone, "POST", _path(topic) + "/terminate/partitions")
    assert status == 405 and "not a partitioned topic" in answer["reason"]
    assert call(standalone, "GET", _path(topic) + "/internalStats")[1]["state"] != "Terminated"
    status, answer = call(standalone, "POST", _path(topic + "-missing") + "/terminate/partitions")
    assert status == 404


def test_delete_needs_force_while_clients_are_connected(standalone, client, topic):
    client.create_producer(topic)
    status, answer = call(standalone, "DELETE", _path(topic))
    assert status == 405 and "connected" in answer["reason"]
    assert call(standalone, "DELETE", _path(topic) + "?force=true")[0] == 204
    assert call(standalone, "GET", _path(topic) + "/stats")[0] == 404


def test_backlog_and_internal_info_describe_the_topic(standalone, client, topic):
    client.subscribe(topic, "s").close()
    fill(client, topic, 4)
    status, info = call(standalone, "GET", _path(topic) + "/backlog")
    assert status == 200 and info["messageBacklog"] == 4 and info["cursorDetails"]["s"]["cursorBacklog"] == 4
    assert info["topicName"] == topic and info["totalMessages"] == 4
    status, info = call(standalone, "GET", _path(topic) + "/internal-info")
    assert status == 200 and sum(l["entries"] for l in info["ledgers"]) == 4 and "terminatedPosition" not in info


def test_partitioned_stats_per_partition_or_not(standalone, client, topic):
    assert call(standalone, "PUT", _path(topic) + "/partitions", 2)[0] == 204
    client.create_producer(topic).send(b"x")
    full = call(standalone, "GET", _path(topic) + "/partitioned-stats?perPartition=true")[1]
    assert len(full["partitions"]) == 2 and full["msgInCounter"] == 1
    brief = call(standalone, "GET", _path(topic) + "/partitioned-stats?perPartition=false")[1]
    assert brief["partitions"] == {} and brief["msgInCounter"] == 1
    status, answer = call(standalone, "GET", _path(topic) + "/stats")  # the partitioned name itself: 404, saying why
    assert status == 404 and "it is a partitioned topic" in answer["reason"]


def test_namespace_clear_backlog_topics_and_unload(standalone, client):
    ns = "public/ops-ns"
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    a, b = f"persistent://{ns}/a", f"persistent://{ns}/b"
    for t in (a, b):
        client.subscribe(t, "s1").close()
        client.subscribe(t, "s2").close()
        fill(client, t, 3)
    assert sorted(call(standalone, "GET", f"/admin/v2/namespaces/{ns}/topics")[1]) == [a, b]
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/clearBacklog?subscription=s1")[0] == 204
    assert [backlog(standalone, t, "s1") for t in (a, b)] == [0, 0]
    assert [backlog(standalone, t, "s2") for t in (a, b)] == [3, 3]
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/clearBacklog")[0] == 204
    assert [backlog(standalone, t, "s2") for t in (a, b)] == [0, 0]

    producer = client.create_producer(a)
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}/unload")[0] == 204
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/bundles")[1]["owned"] == []
    producer.send(b"the producer reconnects after the unload")
    assert call(standalone, "PUT", "/admin/v2/namespaces/public/no-such-ns/unload")[0] == 404


def test_brokers_bookies_and_clusters_listings(standalone):
    assert "standalone" in call(standalone, "GET", "/admin/v2/clusters")[1]
    status, cluster = call(standalone, "GET", "/admin/v2/clusters/standalone")
    assert status == 200 and cluster["serviceUrl"].endswith(f":{standalone.http_port}")
    status, brokers = call(standalone, "GET", "/admin/v2/brokers/standalone")
    assert status == 200 and brokers == [f"127.0.0.1:{standalone.http_port}"]
    assert call(standalone, "GET", "/admin/v2/brokers/elsewhere")[0] == 404
    assert call(standalone, "GET", "/admin/v2/brokers/ready") == (200, b"ok")
    assert call(standalone, "GET", "/admin/v2/brokers/health")[0] == 200
    status, bookies = call(standalone, "GET", "/admin/v2/bookies/all")
    assert status == 200 and len(bookies["bookies"]) == 3
    status, racks = call(standalone, "GET", "/admin/v2/bookies/racks-info")
    zones = sorted(info["zone"] for info in racks["default"].values())
    assert status == 200 and len(set(zones)) == 3, racks
    assert all(info["rack"].startswith("/") for info in racks["default"].values())
