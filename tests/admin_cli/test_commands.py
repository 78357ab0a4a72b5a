"""Every `magnetar-admin` command group run as a subprocess against a real `broker standalone`, output parsed.

Each test checks what the command printed (JSON, or pulsar-admin's one item per line) and, for a command that
changes something, that the change is there when read back through another route; a refusal exits 1 with the
broker's own reason on stderr.
"""

from __future__ import annotations

import json
import uuid

import pulsar
import pytest

from tests.admin_cli.support import Admin, run

LOGGER = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture(scope="module")
def admin(standalone) -> Admin:
    return Admin(standalone.web_url)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_tenants_create_get_update_list_delete(admin):
    tenant = _name("tenant")
    admin("tenants", "create", tenant, "-r", "alice,bob", "-c", "standalone").ok()
    assert admin("tenants", "get", tenant).json() == {"adminRoles": ["alice", "bob"], "allowedClusters": ["standalone"]}
    assert tenant in admin("tenants", "list").lines()
    admin("tenants", "update", tenant, "--admin-roles", "carol", "--allowed-clusters", "standalone").ok()
    assert admin("tenants", "get", tenant).json()["adminRoles"] == ["carol"]
    admin("tenants", "delete", tenant).ok()
    assert tenant not in admin("tenants", "list").lines()
    missing = admin("tenants", "get", tenant)
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr and tenant in missing.stderr


def test_clusters_list_get_create_update_delete(admin, standalone):
    assert "standalone" in admin("clusters", "list").lines()
    assert admin("clusters", "get", "standalone").json()["brokerServiceUrl"] == standalone.service_url
    cluster = _name("east")
    admin("clusters", "create", cluster, "--url", "http://east.example:8080",
          "--broker-url", "pulsar://east.example:6650").ok()
    assert admin("clusters", "get", cluster).json() == {"serviceUrl": "http://east.example:8080",
                                                        "brokerServiceUrl": "pulsar://east.example:6650"}
    admin("clusters", "update", cluster, "--url", "http://east2.example:8080").ok()
    assert admin("clusters", "get", cluster).json() == {"serviceUrl": "http://east2.example:8080"}
    admin("clusters", "delete", cluster).ok()
    assert cluster not in admin("clusters", "list").lines()
    again = admin("clusters", "create", "standalone", "--url", "http://x:1")
    assert again.returncode == 1 and "HTTP 409" in again.stderr


def test_brokers_healthcheck_leader_and_load_report(admin, standalone):
    health = admin("brokers", "healthcheck")
    assert health.lines() == ["ok"]
    leader = admin("brokers", "leader-broker").json()
    assert leader["serviceUrl"] == standalone.web_url
    report = admin("broker-stats", "load-report").json()
    assert isinstance(report, dict) and report


def test_namespaces_create_policies_and_permissions(admin):
    ns = f"public/{_name('ns')}"
    admin("namespaces", "create", ns, "--bundles", "4").ok()
    assert ns in admin("namespaces", "list", "public").lines()
    assert admin("namespaces", "bundles", ns).json()["numBundles"] == 4
    assert isinstance(admin("namespaces", "policies", ns).json(), dict)

    admin("namespaces", "set-retention", ns, "-s", "10M", "-t", "3h").ok()
    assert admin("namespaces", "get-retention", ns).json() == {"retentionTimeInMinutes": 180, "retentionSizeInMB": 10}
    admin("namespaces", "set-retention", ns, "--size", "-1", "--time", "-1").ok()
    assert admin("namespaces", "get-retention", ns).json() == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}

    assert admin("namespaces", "get-deduplication", ns).lines() == ["null"]
    admin("namespaces", "set-deduplication", ns, "--enable").ok()
    assert admin("namespaces", "get-deduplication", ns).json() is True

    admin("namespaces", "set-max-producers-per-topic", ns, "-p", "3").ok()
    admin("namespaces", "set-max-consumers-per-subscription", ns, "-c", "2").ok()
    admin("namespaces", "set-max-unacked-messages-per-consumer", ns, "--max-unacked-messages-per-topic", "500").ok()
    assert admin("namespaces", "get-max-producers-per-topic", ns).json() == 3
    assert admin("namespaces", "get-max-consumers-per-subscription", ns).json() == 2
    assert admin("namespaces", "get-max-unacked-messages-per-consumer", ns).json() == 500

    assert admin("namespaces", "get-publish-rate", ns).lines() == ["null"]
    admin("namespaces", "set-publish-rate", ns, "-m", "100", "-b", "4096").ok()
    assert admin("namespaces", "get-publish-rate", ns).json() == {"publishThrottlingRateInMsg": 100,
                                                                  "publishThrottlingRateInByte": 4096}
    admin("namespaces", "set-dispatch-rate", ns, "-md", "50", "-dt", "2", "-rp").ok()
    assert admin("namespaces", "get-dispatch-rate", ns).json() == {
        "dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 2,
        "relativeToPublishRate": True}
    admin("namespaces", "set-subscription-dispatch-rate", ns, "--msg-dispatch-rate", "7").ok()
    assert admin("namespaces", "get-subscription-dispatch-rate", ns).json()["dispatchThrottlingRateInMsg"] == 7
    admin("namespaces", "remove-publish-rate", ns).ok()
    assert admin("namespaces", "get-publish-rate", ns).lines() == ["null"]

    admin("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,consume").ok()
    assert admin("namespaces", "permissions", ns).json() == {"app": ["consume", "produce"]}
    admin("namespaces", "revoke-permission", ns, "--role", "app").ok()
    assert admin("namespaces", "permissions", ns).json() == {}

    admin("namespaces", "delete", ns).ok()
    assert ns not in admin("namespaces", "list", "public").lines()


def test_namespaces_compaction_threshold_and_schema_policies(admin):
    ns = f"public/{_name('nss')}"
    admin("namespaces", "create", ns).ok()
    assert admin("namespaces", "get-compaction-threshold", ns).lines() == ["null"]
    admin("namespaces", "set-compaction-threshold", ns, "-t", "10M").ok()
    assert admin("namespaces", "get-compaction-threshold", ns).json() == 10 * 1024 * 1024
    admin("namespaces", "remove-compaction-threshold", ns).ok()
    assert admin("namespaces", "get-compaction-threshold", ns).lines() == ["null"]

    assert admin("namespaces", "get-schema-compatibility-strategy", ns).lines() == ["UNDEFINED"]  # as pulsar-admin
    admin("namespaces", "set-schema-compatibility-strategy", ns, "-c", "FORWARD_TRANSITIVE").ok()
    assert admin("namespaces", "get-schema-compatibility-strategy", ns).lines() == ["FORWARD_TRANSITIVE"]
    assert admin("namespaces", "get-is-allow-auto-update-schema", ns).json() is True
    admin("namespaces", "set-is-allow-auto-update-schema", ns, "--disable").ok()
    assert admin("namespaces", "get-is-allow-auto-update-schema", ns).json() is False
    assert admin("namespaces", "get-schema-validation-enforce", ns).json() is False
    admin("namespaces", "set-schema-validation-enforce", ns, "-e").ok()
    assert admin("namespaces", "get-schema-validation-enforce", ns).json() is True
    assert admin("namespaces", "policies", ns).json()["schema_validation_enforced"] is True
    assert admin("namespaces", "set-schema-compatibility-strategy", ns, "-c", "SIDEWAYS").returncode == 2
    assert admin("namespaces", "set-schema-validation-enforce", ns).returncode == 2  # neither --enable nor --disable


def test_topics_lookup_and_partitioned_lookup(admin, standalone):
    topic = f"persistent://public/default/{_name('look')}"
    admin("topics", "create", topic).ok()
    assert admin("topics", "lookup", topic).lines() == [standalone.service_url]
    partitioned = f"persistent://public/default/{_name('plook')}"
    admin("topics", "create-partitioned-topic", partitioned, "-p", "2").ok()
    assert admin("topics", "partitioned-lookup", partitioned).json() == {
        f"{partitioned}-partition-{i}": standalone.service_url for i in range(2)}
    refused = admin("topics", "partitioned-lookup", topic)
    assert refused.returncode == 1 and "is not a partitioned topic" in refused.stderr


def test_namespaces_topics_unload_and_split_bundle(admin, client):
    ns = f"public/{_name('nsb')}"
    admin("namespaces", "create", ns).ok()
    topic = f"persistent://{ns}/t"
    client.create_producer(topic).send(b"x")  # the lookup makes this broker own the bundle
    assert admin("namespaces", "topics", ns).lines() == [topic]
    before = admin("namespaces", "bundles", ns).json()
    [bundle] = before["owned"]
    admin("namespaces", "split-bundle", ns, "-b", bundle).ok()
    assert admin("namespaces", "bundles", ns).json()["numBundles"] == before["numBundles"] + 1
    admin("namespaces", "unload", ns).ok()
    assert admin("namespaces", "bundles", ns).json()["owned"] == []
    wrong = admin("namespaces", "unload", ns, "--bundle", bundle)  # split: no longer one of its bundles
    assert wrong.returncode == 1 and "is not a bundle of" in wrong.stderr


def test_topics_lifecycle_stats_and_partitions(admin, client):
    topic = f"persistent://public/default/{_name('tt')}"
    admin("topics", "create", topic).ok()
    assert topic in admin("topics", "list", "public/default").lines()
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    stats = admin("topics", "stats", topic).json()
    assert stats["msgInCounter"] == 5
    internal = admin("topics", "stats-internal", topic).json()
    assert internal["entriesAddedCounter"] == 5
    last = admin("topics", "last-message-id", topic).json()
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())

    admin("topics", "create-subscription", topic, "-s", "from-start", "-m", "earliest").ok()
    admin("topics", "create-subscription", topic, "-s", "from-end").ok()
    assert admin("topics", "subscriptions", topic).lines() == ["from-end", "from-start"]
    subs = admin("topics", "stats", topic).json()["subscriptions"]
    assert (subs["from-start"]["msgBacklog"], subs["from-end"]["msgBacklog"]) == (5, 0)

    third = f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    admin("topics", "reset-cursor", topic, "-s", "from-end", "--messageId", third).ok()
    assert admin("topics", "stats", topic).json()["subscriptions"]["from-end"]["msgBacklog"] == 3
    admin("topics", "reset-cursor", topic, "-s", "from-end", "-t", "1h").ok()
    assert admin("topics", "stats", topic).json()["subscriptions"]["from-end"]["msgBacklog"] == 5

    admin("topics", "unsubscribe", topic, "-s", "from-end").ok()
    assert admin("topics", "subscriptions", topic).lines() == ["from-start"]
    producer.close()
    admin("topics", "unload", topic).ok()
    admin("topics", "grant-permission", topic, "--role", "reader", "--actions", "consume").ok()
    assert admin("topics", "permissions", topic).json() == {"reader": ["consume"]}
    admin("topics", "revoke-permission", topic, "--role", "reader").ok()
    admin("topics", "delete", topic).ok()
    assert topic not in admin("topics", "list", "public/default").lines()

    partitioned = f"persistent://public/default/{_name('pt')}"
    admin("topics", "create-partitioned-topic", partitioned, "-p", "2").ok()
    assert admin("topics", "get-partitioned-topic-metadata", partitioned).json() == {"partitions": 2}
    admin("topics", "update-partitioned-topic", partitioned, "--partitions", "3").ok()
    assert admin("topics", "get-partitioned-topic-metadata", partitioned).json() == {"partitions": 3}
    assert partitioned in admin("topics", "list-partitioned-topics", "public/default").lines()
    pstats = admin("topics", "partitioned-stats", partitioned, "--per-partition").json()
    assert pstats["metadata"] == {"partitions": 3} and len(pstats["partitions"]) == 3
    admin("topics", "delete-partitioned-topic", partitioned).ok()
    gone = admin("topics", "get-partitioned-topic-metadata", partitioned).json()
    assert gone == {"partitions": 0}


RECORD = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
RECORD_V1 = {**RECORD, "fields": [*RECORD["fields"], {"name": "note", "type": "string", "default": ""}]}


def test_schemas_upload_get_and_delete(admin, tmp_path):
    topic = f"persistent://public/default/{_name('sch')}"
    admin("topics", "create", topic).ok()
    for i, record in enumerate((RECORD, RECORD_V1)):
        (tmp_path / f"v{i}.json").write_text(json.dumps({"type": "AVRO", "schema": json.dumps(record),
                                                          "properties": {"owner": "billing"}}))
        admin("schemas", "upload", topic, "-f", str(tmp_path / f"v{i}.json")).ok()
    latest = admin("schemas", "get", topic).json()
    assert (latest["version"], latest["type"], json.loads(latest["data"])) == (1, "AVRO", RECORD_V1)
    assert latest["properties"] == {"owner": "billing"}
    assert json.loads(admin("schemas", "get", topic, "-v", "0").json()["data"]) == RECORD
    every = admin("schemas", "get", topic, "--all-version").json()["getSchemaResponses"]
    assert [v["version"] for v in every] == [0, 1]
    (tmp_path / "breaking.json").write_text(json.dumps({"type": "AVRO", "schema": json.dumps(
        {**RECORD, "fields": [{"name": "id", "type": "string"}]})}))
    refused = admin("schemas", "upload", topic, "-f", str(tmp_path / "breaking.json"))
    assert refused.returncode == 1 and "HTTP 409" in refused.stderr
    admin("schemas", "delete", topic).ok()
    gone = admin("schemas", "get", topic)
    assert gone.returncode == 1 and "HTTP 404" in gone.stderr


def test_topics_compact_and_compaction_status(admin, client):
    topic = f"persistent://public/default/{_name('cmp')}"
    producer = client.create_producer(topic, batching_enabled=False)
    for value in (b"1", b"2", b"3"):
        producer.send(value, partition_key="k")
    assert admin("topics", "compact", topic).lines() == [f"Topic compaction requested for {topic}"]
    assert admin("topics", "compaction-status", topic, "-w").lines() == ["Compaction was a success"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert reader.read_next(10_000).data() == b"3"  # the key's last value only
    reader.close()
    producer.close()


def test_short_topic_names_mean_public_default(admin):
    local = _name("short")
    admin("topics", "create", local).ok()
    assert f"persistent://public/default/{local}" in admin("topics", "list", "public/default").lines()
    admin("topics", "delete", f"public/default/{local}").ok()


# ---- refusals: the broker's reason on stderr, exit 1; malformed arguments: exit 2, nothing sent ---------------


@pytest.mark.parametrize("args, status, reason", [
    (("namespaces", "set-max-producers-per-topic", "public/default", "-p", "-5"), 400,
     "maxProducersPerTopic must be in 0.."),
    (("namespaces", "create", "no-such-tenant/ns"), 404, "no-such-tenant"),
    (("topics", "stats", "persistent://public/default/never-created-topic"), 404, "does not exist"),
    (("topics", "reset-cursor", "public/default/never-created-topic", "-s", "s", "-t", "1h"), 404, "does not exist"),
    (("tenants", "delete", "public"), 405, "tenant public still has namespaces"),
    (("namespaces", "set-dispatch-rate", "public/default", "-dt", "0"), 400, "ratePeriodInSecond"),
])
def test_refusals_exit_1_with_the_brokers_reason(admin, args, status, reason):
    result = admin(*args)
    assert result.returncode == 1, result
    assert f"HTTP {status}" in result.stderr and reason in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("args, message", [
    (("namespaces", "set-retention", "public/default", "-s", "ten", "-t", "1h"), "invalid size"),
    (("namespaces", "set-retention", "public/default", "-s", "1G", "-t", "3q"), "invalid time unit"),
    (("topics", "reset-cursor", "t", "-s", "s", "-m", "12"), "ledgerId:entryId"),
    (("topics", "reset-cursor", "t", "-s", "s"), "exactly one of --time / --messageId"),
    (("namespaces", "policies", "only-one-part"), "expected <tenant>/<namespace>"),
    (("topics", "stats", "a/b/c/d"), "invalid topic"),
    (("namespaces", "set-deduplication", "public/default"), "exactly one of --enable / --disable"),
    (("topics", "no-such-command"), "No such command"),
])
def test_malformed_arguments_exit_2_before_anything_is_sent(args, message):
    result = run(*args, url="http://127.0.0.1:9")  # nothing listens on port 9: a request would fail differently
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr


def test_unreachable_broker_exits_1_and_says_where():
    result = run("tenants", "list", url="http://127.0.0.1:9")
    assert result.returncode == 1 and "cannot reach the broker at http://127.0.0.1:9" in result.stderr


def test_client_conf_from_PULSAR_CLIENT_CONF_and_flags_over_it(admin, standalone, tmp_path):
    conf = tmp_path / "client.conf"
    conf.write_text(f"# as pulsar-admin reads it\nwebServiceUrl={standalone.web_url}\nbrokerServiceUrl=pulsar://x:1\n")
    assert "public" in run("tenants", "list", env={"PULSAR_CLIENT_CONF": str(conf)}).lines()
    assert "public" in run("--client-conf", str(conf), "tenants", "list").lines()
    conf.write_text("webServiceUrl=http://127.0.0.1:9\n")
    assert "public" in run("tenants", "list", url=standalone.web_url,
                           env={"PULSAR_CLIENT_CONF": str(conf)}).lines()  # --admin-url wins
    broken = run("tenants", "list", env={"PULSAR_CLIENT_CONF": str(tmp_path / "missing.conf")})
    assert broken.returncode == 1 and "cannot read client configuration" in broken.stderr


def test_shell_completion_completes_groups_and_commands():
    """click's completion, as docs/magnetar-admin.md tells bash, zsh and fish users to load it."""
    def complete(words: str) -> list[str]:
        env = {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
               "_MAGNETAR_ADMIN_COMPLETE": "bash_complete"}
        return run(env=env).ok().stdout.splitlines()

    assert complete("magnetar-admin top") == ["plain,topics"]
    assert complete("magnetar-admin topics partitioned-s") == ["plain,partitioned-stats",
                                                               "plain,partitioned-stats-internal"]
    assert "complete -o nosort -F _magnetar_admin_completion magnetar-admin" in run(
        env={"_MAGNETAR_ADMIN_COMPLETE": "bash_source"}).ok().stdout
