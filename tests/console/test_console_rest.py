"""The REST the console reads (/admin/magnetar/v1) and its static files, against a real `broker standalone`,
with the official pulsar-client producing: what each endpoint answers, and a clear 400 for input out of bounds."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from storage.testing.waiting import wait_until
from tests.console.support import set_bookie_read_only

V1 = "/admin/magnetar/v1"


def http(standalone, path: str, method: str = "GET", body=None) -> tuple[int, dict | str, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{standalone.http_port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, raw, headers = answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(), dict(exc.headers)
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw.decode(), headers


def ok(standalone, path: str):
    status, doc, _ = http(standalone, path)
    assert status == 200, (path, status, doc)
    return doc


@pytest.mark.parametrize("path, complaint", [
    (f"{V1}/namespaces/public/default/topics?limit=0", "limit must be an integer in 1..500"),
    (f"{V1}/namespaces/public/default/topics?limit=100000", "limit must be an integer in 1..500"),
    (f"{V1}/namespaces/public/default/topics?offset=-3", "offset must be an integer"),
    (f"{V1}/namespaces/public/default/topics?filter=" + "x" * 300, "filter must be at most 200"),
    (f"{V1}/metadata?path=ledgers", "path must start with '/'"),
    (f"{V1}/metadata?path=/ledgers/../admin", "'..' segment"),
    (f"{V1}/ledgers/abc", "ledger id must be an integer"),
    (f"{V1}/ledgers/{2**64}", "ledger id must be an integer"),
    (f"{V1}/ledgers/0/entries/middle", "entry must be 'first', 'last' or an entry id"),
])
def test_out_of_bounds_input_gets_a_specific_400(standalone, path, complaint):
    status, doc, _ = http(standalone, path)
    assert status == 400 and complaint in doc["reason"], (status, doc)


@pytest.mark.parametrize("path, complaint", [
    (f"{V1}/ledgers/987654321", "ledger 987654321 does not exist"),
    (f"{V1}/metadata?path=/no/such/node", "no metadata node /no/such/node"),
    (f"{V1}/namespaces/public/nowhere/topics", "namespace public/nowhere does not exist"),
    (f"{V1}/persistent/public/default/never-made/ledgers", "does not exist"),
])
def test_missing_things_are_404(standalone, path, complaint):
    status, doc, _ = http(standalone, path)
    assert status == 404 and complaint in doc["reason"], (status, doc)


def test_the_console_files_are_served_and_nothing_else(standalone):
    status, page, headers = http(standalone, "/console/")
    assert status == 200 and "<title>Magnetar console</title>" in page
    assert headers["Content-Type"].startswith("text/html")
    status, script, headers = http(standalone, "/console/app.js")
    assert status == 200 and "hashchange" in script and headers["Content-Type"].startswith("text/javascript")
    for missing in ("/console/nope.js", "/console/..", "/console/.hidden.js", "/console/%2e%2e%2fREADME.md"):
        assert http(standalone, missing)[0] == 404, missing
    request = urllib.request.Request(f"http://127.0.0.1:{standalone.http_port}/console")
    with urllib.request.urlopen(request, timeout=30) as answer:  # follows the redirect
        assert answer.url.endswith("/console/")


def test_ledgers_entries_and_bookies_after_producing(standalone, client, topic):
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"message {i}".encode())
    local = topic.rsplit("/", 1)[1]
    chain = ok(standalone, f"{V1}/persistent/public/default/{local}/ledgers")
    assert chain["total"] == 1 and chain["lastConfirmedEntry"].endswith(":2")
    ledger = chain["ledgers"][0]
    md = ledger["metadata"]
    assert ledger["entries"] == 3 and md["state"] == "OPEN" and md["meetsZoneRule"]
    ensemble = md["fragments"][0]["ensemble"]
    assert len(ensemble) == md["ensembleSize"] and {b["zone"] for b in ensemble} <= {"zone-a", "zone-b", "zone-c"}
    assert ok(standalone, f"{V1}/ledgers/{ledger['ledgerId']}") == md

    first = ok(standalone, f"{V1}/ledgers/{ledger['ledgerId']}/entries/first")
    assert first["entryId"] == 0 and "message 0" in first["utf8"] and b"message 0" in bytes.fromhex(first["hex"])
    last = ok(standalone, f"{V1}/ledgers/{ledger['ledgerId']}/entries/last")
    # Read without fencing the writer: up to the last add confirmed the bookies know of.
    assert last["entryId"] == last["lastAddConfirmed"] and f"message {last['entryId']}" in last["utf8"]
    status, doc, _ = http(standalone, f"{V1}/ledgers/{ledger['ledgerId']}/entries/{10**6}")
    assert status == 404 and "past ledger" in doc["reason"]

    doc = ok(standalone, f"{V1}/bookies")
    assert doc["underReplicated"] == {"count": 0, "ledgers": []}
    bookies = {b["bookieId"]: b for b in doc["bookies"]}
    assert {b: r["zone"] for b, r in bookies.items()} == {f"standalone-bookie-{z}": f"zone-{z}" for z in "abc"}
    for b in ensemble:
        row = bookies[b["bookieId"]]
        assert row["state"] == "writable" and row["journalFsyncLatency"]["count"] >= 3
        assert row["journalFsyncLatency"]["p99_ms"] > 0 and 0 < row["diskUsage"] < 1 and row["diskTotalBytes"] > 0


def test_brokers_report_their_bundles_load_and_one_leader(standalone, client, topic):
    client.create_producer(topic).send(b"x")
    lookup = ok(standalone, "/lookup/v2/topic/persistent/" + topic.removeprefix("persistent://"))

    def reported():
        doc = ok(standalone, f"{V1}/brokers")
        owner = next((b for b in doc["brokers"] if b["nativeUrl"] == lookup["brokerUrl"]), None)
        return doc if owner and owner["numTopics"] >= 1 and any(
            x.startswith("public/default/") for x in owner["bundles"]) else None

    # Load reports are written periodically: wait for the one that counts the topic's bundle.
    doc = wait_until(reported, 60, lambda: f"a load report with the topic's bundle ({ok(standalone, V1 + '/brokers')})")
    owner = next(b for b in doc["brokers"] if b["nativeUrl"] == lookup["brokerUrl"])
    assert owner["numBundles"] == len(owner["bundles"]) and owner["cpu"]["limit"] > 0 and owner["cpu"]["usage"] >= 0
    assert {"msgRateIn", "msgRateOut", "numConnections", "httpUrl"} <= set(owner)
    assert [b["brokerId"] for b in doc["brokers"] if b["leader"]] == [doc["leader"]]
    assert sum(b["thisBroker"] for b in doc["brokers"]) == 1


def test_health_names_a_read_only_bookie(standalone):
    # Not "green" outright: on a busy shared machine a slow fsync or a full disk may be amber too.
    def about_c(health):
        return [f for f in health["findings"] if f["subject"] == "bookie standalone-bookie-c"]

    assert about_c(ok(standalone, f"{V1}/health")) == []
    set_bookie_read_only(standalone, "standalone-bookie-c", True)
    try:
        health = wait_until(lambda: (h := ok(standalone, f"{V1}/health")) and about_c(h) and h, 30,
                            "a finding about the read-only bookie")
        assert health["status"] in ("amber", "red")
        mine = about_c(health)
        assert [f["level"] for f in mine] == ["amber"] and mine[0]["reason"].startswith("read-only"), health
        rows = {b["bookieId"]: b["state"] for b in ok(standalone, f"{V1}/bookies")["bookies"]}
        assert rows["standalone-bookie-c"] == "readonly"
    finally:
        set_bookie_read_only(standalone, "standalone-bookie-c", None)
    wait_until(lambda: about_c(ok(standalone, f"{V1}/health")) == [], 30, "the finding to go away")


def test_topic_list_pages_and_filters_without_loading(standalone):
    assert http(standalone, "/admin/v2/namespaces/public/paged", "PUT")[0] == 204
    for i in range(7):
        assert http(standalone, f"/admin/v2/persistent/public/paged/p-{i}", "PUT")[0] == 204
    assert http(standalone, "/admin/v2/persistent/public/paged/other", "PUT")[0] == 204
    page = ok(standalone, f"{V1}/namespaces/public/paged/topics?offset=3&limit=3&filter=p-")
    assert (page["total"], [t["localName"] for t in page["topics"]]) == (7, ["p-3", "p-4", "p-5"])
    assert all(t["loaded"] and t["msgInCounter"] == 0 for t in page["topics"])
    assert ok(standalone, f"{V1}/namespaces/public/paged/topics")["total"] == 8


def test_a_topic_rows_rates_come_from_the_stats_window_with_its_consumers(standalone, client, topic):
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    local = topic.rsplit("/", 1)[1]

    def row():
        return ok(standalone, f"{V1}/namespaces/public/default/topics?filter={local}")["topics"][0]

    # The window needs two samples (every 5 s by default) that see the counters grow.
    shown = wait_until(lambda: (r := row())["msgRateIn"] > 0 and r, 30, "the topic's rate in the list")
    assert (shown["producers"], shown["subscriptions"], shown["consumers"]) == (1, 1, 1)
    assert shown["msgThroughputIn"] > shown["msgRateIn"] and shown["msgInCounter"] == 20
    for i in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=15_000))
    wait_until(lambda: row()["msgRateOut"] > 0, 30, "the topic's rate out in the list")
    consumer.close()
    assert wait_until(lambda: (r := row())["consumers"] == 0 and r, 30, "the consumer gone")["producers"] == 1


def test_metadata_browser_reads_nodes_with_version_ephemeral_flag_and_redaction(standalone, client, topic):
    client.create_producer(topic).send(b"x")
    root = ok(standalone, f"{V1}/metadata?path=/")
    assert {"ledgers", "managed-ledgers"} <= set(root["children"]) and "version" not in root
    available = ok(standalone, f"{V1}/metadata?path=/ledgers/available/standalone-bookie-a")
    assert available["ephemeral"] and available["data"]["encoding"] == "json"
    assert available["data"]["value"]["network_location"] == "/zone-a/ud0"
    ml = ok(standalone, f"{V1}/metadata?path=/managed-ledgers/public/default/persistent/{topic.rsplit('/', 1)[1]}")
    assert not ml["ephemeral"] and ml["version"] >= 0 and ml["data"]["value"]["ledgers"]
    ledger_id = ml["data"]["value"]["ledgers"][0]["ledger_id"]
    digits = f"{ledger_id:010d}"
    node = ok(standalone, f"{V1}/metadata?path=/ledgers/{digits[:2]}/{digits[2:6]}/L{digits[6:]}")
    assert node["data"]["value"]["password"] == "<redacted>" and node["data"]["value"]["ledger_id"] == ledger_id
    paged = ok(standalone, f"{V1}/metadata?path=/ledgers/available&limit=1")
    assert paged["childrenTotal"] >= 3 and len(paged["children"]) == 1


@pytest.mark.parametrize("anonymous_role, allowed", [("anon", False), ("root", True)])
def test_with_authorization_on_the_page_is_open_and_its_data_needs_the_role(start_standalone, anonymous_role, allowed):
    broker = start_standalone(env={"MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
                                   "MAGNETAR_BROKER_ANONYMOUS_USER_ROLE": anonymous_role,
                                   "MAGNETAR_BROKER_SUPER_USER_ROLES": "root"})
    if allowed:  # with authorization on the broker leaves public/default to a superuser, here the anonymous role
        tenant = {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert http(broker, "/admin/v2/tenants/public", "PUT", tenant)[0] == 204
        assert http(broker, "/admin/v2/namespaces/public/default", "PUT", {})[0] == 204
    # else nobody here is a superuser and public/default does not exist: a role without grants hears 403, not 404
    assert http(broker, "/console/")[0] == 200 and http(broker, "/console/app.js")[0] == 200
    for path in (f"{V1}/bookies", f"{V1}/health", f"{V1}/brokers", f"{V1}/metadata?path=/",
                 f"{V1}/namespaces/public/default/topics"):
        status, doc, _ = http(broker, path)
        assert status == (200 if allowed else 403), (path, status, doc)
    # The console's actions are the admin routes themselves: refused alike, and nothing changes.
    status, _, _ = http(broker, "/admin/v2/persistent/public/default/guarded/subscription/s", "PUT")
    assert status == (204 if allowed else 403)
