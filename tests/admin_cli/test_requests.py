"""Which request each command sends, from a table: the command run through click with a recording REST client.

The wire-level behaviour of these commands is tested against a real broker in test_commands.py and
test_lifecycle_commands.py; this table pins the route, verb, body and query of each command, including those
whose flags turn into documents (quotas, persistence, inactive-topic policies) and pulsar-admin's unit forms.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from broker.admin_cli.main import cli
from broker.admin_cli.rest import Response

NS = "/admin/v2/namespaces/public/orders"
T = "/admin/v2/persistent/public/default/t"


class RecordingRest:
    def __init__(self):
        self.sent: list[tuple] = []

    def request(self, method, path, body=None, *, query=None):
        self.sent.append((method, path, body, {k: v for k, v in (query or {}).items() if v is not None}))
        if path.endswith("/terminate"):
            return Response(200, {}, b'{"ledgerId": 3, "entryId": 9, "partitionIndex": -1}')
        if path.endswith("/terminate/partitions"):
            return Response(200, {}, b'{"0": {"ledgerId": 3, "entryId": 9, "partitionIndex": 0}}')
        if path.endswith("/compaction") and method == "GET":
            return Response(200, {}, b'{"status": "SUCCESS", "lastError": ""}')
        if method == "GET" and path.count("/") == 5 and path.split("/")[3] in ("persistent", "non-persistent"):
            return Response(200, {}, b"[]")  # a namespace's topics
        if "/position/" in path:
            return Response(200, {"x-pulsar-message-id": "3:0", "x-pulsar-property": '{"k": "v"}'}, b"hello")
        return Response(200, {}, b"")

    def get(self, path, **query):
        return self.request("GET", path, query=query).json()

    def put(self, path, body=None, **query):
        self.request("PUT", path, body, query=query)

    def post(self, path, body=None, **query):
        self.request("POST", path, body, query=query)

    def delete(self, path, **query):
        self.request("DELETE", path, query=query)


class FakeSession:
    def __init__(self):
        self.rest = RecordingRest()


def invoke(*args):
    session = FakeSession()
    result = CliRunner().invoke(cli, list(args), obj=session, catch_exceptions=False)
    return result, session.rest.sent


@pytest.mark.parametrize("args, sent", [
    (("namespaces", "set-message-ttl", "public/orders", "-ttl", "2h"), [("POST", f"{NS}/messageTTL", 7200, {})]),
    (("namespaces", "remove-message-ttl", "public/orders"), [("DELETE", f"{NS}/messageTTL", None, {})]),
    (("namespaces", "set-backlog-quota", "public/orders", "-l", "10M", "-p", "producer_exception"),
     [("POST", f"{NS}/backlogQuota", {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"},
       {"backlogQuotaType": "destination_storage"})]),
    (("namespaces", "set-backlog-quota", "public/orders", "-lt", "1h", "-p", "consumer_backlog_eviction",
      "-t", "message_age"),
     [("POST", f"{NS}/backlogQuota", {"limitSize": -1, "limitTime": 3600, "policy": "consumer_backlog_eviction"},
       {"backlogQuotaType": "message_age"})]),
    (("namespaces", "get-backlog-quotas", "public/orders"), [("GET", f"{NS}/backlogQuotaMap", None, {})]),
    (("namespaces", "remove-backlog-quota", "public/orders", "-t", "message_age"),
     [("DELETE", f"{NS}/backlogQuota", None, {"backlogQuotaType": "message_age"})]),
    (("namespaces", "set-persistence", "public/orders", "-e", "3", "-w", "3", "-a", "2"),
     [("POST", f"{NS}/persistence", {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2,
                                      "managedLedgerMaxMarkDeleteRate": 0.0}, {})]),
    (("namespaces", "set-inactive-topic-policies", "public/orders", "-e", "-t", "10m"),
     [("POST", f"{NS}/inactiveTopicPolicies", {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                                "maxInactiveDurationSeconds": 600, "deleteWhileInactive": True}, {})]),
    (("namespaces", "set-subscription-expiration-time", "public/orders", "-t", "30"),
     [("POST", f"{NS}/subscriptionExpirationTime", 30, {})]),
    (("namespaces", "remove-max-producers-per-topic", "public/orders"),
     [("DELETE", f"{NS}/maxProducersPerTopic", None, {})]),
    (("namespaces", "remove-retention", "public/orders"), [("DELETE", f"{NS}/retention", None, {})]),
    (("namespaces", "clear-backlog", "public/orders", "-force"), [("POST", f"{NS}/clearBacklog", None, {})]),
    (("namespaces", "clear-backlog", "public/orders", "--force", "-s", "billing", "-b", "0x00000000_0x40000000"),
     [("POST", f"{NS}/0x00000000_0x40000000/clearBacklog", None, {"subscription": "billing"})]),
    (("topics", "set-message-ttl", "t", "-t", "90"), [("POST", f"{T}/messageTTL", None, {"messageTTL": 90})]),
    (("topics", "get-message-ttl", "t", "--applied"), [("GET", f"{T}/messageTTL", None, {"applied": True})]),
    (("topics", "set-retention", "t", "-s", "1G", "-t", "2d"),
     [("POST", f"{T}/retention", {"retentionTimeInMinutes": 2880, "retentionSizeInMB": 1024}, {})]),
    (("topics", "set-backlog-quota", "t", "-l", "1M", "-p", "producer_request_hold"),
     [("POST", f"{T}/backlogQuota", {"limitSize": 1024 * 1024, "limitTime": -1, "policy": "producer_request_hold"},
       {"backlogQuotaType": "destination_storage"})]),
    (("topics", "get-backlog-quotas", "t", "-ap"), [("GET", f"{T}/backlogQuotaMap", None, {"applied": True})]),
    (("topics", "set-deduplication", "t", "--enable"), [("POST", f"{T}/deduplicationEnabled", True, {})]),
    (("topics", "set-max-producers", "t", "-p", "4"), [("POST", f"{T}/maxProducers", 4, {})]),
    (("topics", "set-max-unacked-messages-per-consumer", "t", "-m", "100"),
     [("POST", f"{T}/maxUnackedMessagesOnConsumer", 100, {})]),
    (("topics", "remove-persistence", "t"), [("DELETE", f"{T}/persistence", None, {})]),
    (("topics", "set-publish-rate", "t", "-m", "20"),
     [("POST", f"{T}/publishRate", {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}, {})]),
    (("topics", "get-publish-rate", "t", "--applied"), [("GET", f"{T}/publishRate", None, {"applied": True})]),
    (("topics", "remove-publish-rate", "t"), [("DELETE", f"{T}/publishRate", None, {})]),
    (("topics", "set-dispatch-rate", "t", "-md", "50", "-bd", "4096", "-dt", "2", "-rp"),
     [("POST", f"{T}/dispatchRate", {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 4096,
                                     "ratePeriodInSecond": 2, "relativeToPublishRate": True}, {})]),
    (("topics", "set-subscription-dispatch-rate", "t", "-md", "7"),
     [("POST", f"{T}/subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": -1,
                                                 "ratePeriodInSecond": 1, "relativeToPublishRate": False}, {})]),
    (("topics", "get-subscription-dispatch-rate", "t"), [("GET", f"{T}/subscriptionDispatchRate", None, {})]),
    (("topics", "remove-dispatch-rate", "t"), [("DELETE", f"{T}/dispatchRate", None, {})]),
    (("namespaces", "set-publish-rate", "public/orders", "-b", "1024"),
     [("POST", f"{NS}/publishRate", {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 1024}, {})]),
    (("topics", "skip", "t", "-s", "billing", "-n", "5"), [("POST", f"{T}/subscription/billing/skip/5", None, {})]),
    (("topics", "skip-all", "t", "-s", "billing"), [("POST", f"{T}/subscription/billing/skip_all", None, {})]),
    (("topics", "clear-backlog", "t", "-s", "billing"), [("POST", f"{T}/subscription/billing/skip_all", None, {})]),
    (("topics", "expire-messages", "t", "-s", "billing", "-t", "1h"),
     [("POST", f"{T}/subscription/billing/expireMessages/3600", None, {})]),
    (("topics", "expire-messages-all-subscriptions", "t", "--expireTime", "30"),
     [("POST", f"{T}/all_subscription/expireMessages/30", None, {})]),
    (("topics", "info-internal", "t"), [("GET", f"{T}/internal-info", None, {})]),
    (("topics", "peek-messages", "t", "-s", "a b", "-n", "2"),
     [("GET", f"{T}/subscription/a%20b/position/1", None, {}), ("GET", f"{T}/subscription/a%20b/position/2", None, {})]),
    (("topics", "terminate", "t"), [("POST", f"{T}/terminate", None, {})]),
    (("topics", "partitioned-terminate", "t"), [("POST", f"{T}/terminate/partitions", None, {})]),
    (("topics", "compact", "t"), [("PUT", f"{T}/compaction", None, {})]),
    (("topics", "compaction-status", "t"), [("GET", f"{T}/compaction", None, {})]),
    (("namespaces", "set-compaction-threshold", "public/orders", "-t", "1G"),
     [("POST", f"{NS}/compactionThreshold", 1024 ** 3, {})]),
    (("namespaces", "remove-compaction-threshold", "public/orders"), [("DELETE", f"{NS}/compactionThreshold", None, {})]),
    (("namespaces", "set-schema-compatibility-strategy", "public/orders", "-c", "full"),
     [("POST", f"{NS}/schemaCompatibilityStrategy", "FULL", {})]),
    (("namespaces", "set-is-allow-auto-update-schema", "public/orders", "-d"),
     [("POST", f"{NS}/isAllowAutoUpdateSchema", False, {})]),
    (("namespaces", "set-schema-validation-enforce", "public/orders", "--enable"),
     [("POST", f"{NS}/schemaValidationEnforced", True, {})]),
    (("topics", "list", "public/orders"), [("GET", "/admin/v2/persistent/public/orders", None, {}),
                                           ("GET", "/admin/v2/non-persistent/public/orders", None, {})]),
    (("topics", "list", "public/orders", "-td", "non_persistent"),
     [("GET", "/admin/v2/non-persistent/public/orders", None, {})]),
    (("schemas", "get", "t"), [("GET", "/admin/v2/schemas/public/default/t/schema", None, {})]),
    (("schemas", "get", "t", "-v", "2"), [("GET", "/admin/v2/schemas/public/default/t/schema/2", None, {})]),
    (("schemas", "get", "t", "--all-version"), [("GET", "/admin/v2/schemas/public/default/t/schemas", None, {})]),
    (("schemas", "delete", "t", "-f"), [("DELETE", "/admin/v2/schemas/public/default/t/schema", None, {"force": True})]),
])
def test_command_sends(args, sent):
    result, recorded = invoke(*args)
    assert result.exit_code == 0, result.output
    assert recorded == sent


def test_schema_upload_sends_the_files_json(tmp_path):
    definition = {"type": "JSON", "schema": '{"type": "record", "name": "R", "fields": []}', "properties": {}}
    (tmp_path / "schema.json").write_text(json.dumps(definition))
    result, sent = invoke("schemas", "upload", "persistent://a/b/c", "-f", str(tmp_path / "schema.json"))
    assert result.exit_code == 0 and sent == [("POST", "/admin/v2/schemas/a/b/c/schema", definition, {})]
    (tmp_path / "bad.json").write_text("{not json")
    result, sent = invoke("schemas", "upload", "t", "-f", str(tmp_path / "bad.json"))
    assert result.exit_code == 2 and "is not JSON" in result.output and sent == []


def test_compaction_prints_as_pulsar_admin():
    assert invoke("topics", "compact", "t")[0].output == (
        "Topic compaction requested for persistent://public/default/t\n")
    assert invoke("topics", "compaction-status", "t")[0].output == "Compaction was a success\n"


def test_terminate_and_peek_print_as_pulsar_admin():
    result, _ = invoke("topics", "terminate", "t")
    assert result.output == "Topic successfully terminated at 3:9\n"
    result, _ = invoke("topics", "peek-messages", "t", "-s", "s")
    lines = result.output.splitlines()
    assert lines[0] == "Message ID: 3:0" and "Properties:" in lines
    assert "|00000000| 68 65 6c 6c 6f " in result.output and "|hello           |" in result.output


@pytest.mark.parametrize("args, message", [
    (("namespaces", "set-backlog-quota", "public/orders", "-p", "producer_exception"), "--limit and/or --limitTime"),
    (("namespaces", "set-backlog-quota", "public/orders", "-l", "1M", "-p", "drop_everything"), "drop_everything"),
    (("namespaces", "set-inactive-topic-policies", "public/orders", "-t", "1m"), "exactly one of"),
    (("topics", "peek-messages", "t", "-s", "s", "-n", "0"), "-n"),
])
def test_bad_flags_are_usage_errors_and_send_nothing(args, message):
    result, recorded = invoke(*args)
    assert result.exit_code == 2 and message in result.output and recorded == []


def test_namespace_clear_backlog_asks_first_and_sends_nothing_on_no():
    session = FakeSession()
    result = CliRunner().invoke(cli, ["namespaces", "clear-backlog", "public/orders"], obj=session, input="n\n")
    assert result.exit_code != 0 and session.rest.sent == []
