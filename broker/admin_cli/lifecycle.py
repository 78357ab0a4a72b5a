"""Backlog operations pulsar-admin users reach for: ``topics peek-messages | skip | skip-all | clear-backlog |
expire-messages | expire-messages-all-subscriptions | terminate | partitioned-terminate | info-internal`` and
``namespaces clear-backlog``.

``peek-messages`` prints each message as pulsar-admin does: its id and metadata lines, then the payload as a
hex dump (Netty's prettyHexDump layout), from ``GET .../subscription/{sub}/position/{n}`` for n = 1..count.
"""

from __future__ import annotations

import json
import urllib.parse

import click

from broker.admin_cli.namespaces import _ns_command
from broker.admin_cli.output import emit
from broker.admin_cli.params import RELATIVE_TIME, quote
from broker.admin_cli.topics import _SUBSCRIPTION, _topic_command

MAX_PEEK = 1000  # one request per message: a larger peek is a read, for a consumer


def hex_dump(data: bytes) -> str:
    """``data`` in Netty's prettyHexDump layout: 16 bytes a row, offset, hex and printable ASCII."""
    top = "         +-------------------------------------------------+"
    rule = "+--------+-------------------------------------------------+----------------+"
    lines = [top, "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |", rule]
    for offset in range(0, len(data), 16):
        row = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in row).ljust(47)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row).ljust(16)
        lines.append(f"|{offset:08x}| {hexes} |{text}|")
    lines.append(rule)
    return "\n".join(lines)


def describe_peeked(headers: dict[str, str], body: bytes) -> str:
    """One peeked message as pulsar-admin prints it: ``Message ID: L:E``, its metadata, the payload dump."""
    lines = [f"Message ID: {headers.get('x-pulsar-message-id', '?')}"]
    for header, label in (("x-pulsar-publish-time", "Publish time"), ("x-pulsar-event-time", "Event time"),
                          ("x-pulsar-producer-name", "Producer name"), ("x-pulsar-sequence-id", "Sequence id"),
                          ("x-pulsar-partition-key", "Key"), ("x-pulsar-num-batch-message", "Batch messages")):
        if header in headers:
            lines.append(f"{label}: {headers[header]}")
    properties = json.loads(headers.get("x-pulsar-property", "{}") or "{}")
    if properties:
        lines.append("Properties:")
        lines.append(json.dumps(properties, indent=2, ensure_ascii=False))
    lines.append(hex_dump(body))
    return "\n".join(lines)


@_topic_command("peek-messages", "Peek at the next messages of a subscription, without consuming them.")
@_SUBSCRIPTION
@click.option("-n", "--count", type=click.IntRange(1, MAX_PEEK), default=1, show_default=True,
              help="Number of messages.")
def peek_messages(rest, path, subscription, count):
    for n in range(1, count + 1):
        response = rest.request("GET", f"{path}/subscription/{quote(subscription)}/position/{n}")
        if n > 1:
            click.echo()
        click.echo(describe_peeked(response.headers, response.body))


@_topic_command("skip", "Skip the next N messages of a subscription.")
@_SUBSCRIPTION
@click.option("-n", "--count", type=click.IntRange(0), required=True, help="Number of messages to skip.")
def skip(rest, path, subscription, count):
    rest.post(f"{path}/subscription/{quote(subscription)}/skip/{count}")


@_topic_command("skip-all", "Skip every message of a subscription's backlog.")
@_SUBSCRIPTION
def skip_all(rest, path, subscription):
    rest.post(f"{path}/subscription/{quote(subscription)}/skip_all")


@_topic_command("clear-backlog", "Clear a subscription's backlog (as skip-all).")
@_SUBSCRIPTION
def clear_backlog(rest, path, subscription):
    rest.post(f"{path}/subscription/{quote(subscription)}/skip_all")


_EXPIRE_TIME = click.option("-t", "--expireTime", "expire_s", type=RELATIVE_TIME, required=True,
                            help="Expire messages older than this: 100 (seconds), 10m, 3h.")


@_topic_command("expire-messages", "Expire a subscription's messages older than the given time.")
@_SUBSCRIPTION
@_EXPIRE_TIME
def expire_messages(rest, path, subscription, expire_s):
    rest.post(f"{path}/subscription/{quote(subscription)}/expireMessages/{max(expire_s, 0)}")


@_topic_command("expire-messages-all-subscriptions", "Expire every subscription's messages older than the time.")
@_EXPIRE_TIME
def expire_all(rest, path, expire_s):
    rest.post(f"{path}/all_subscription/expireMessages/{max(expire_s, 0)}")


@_topic_command("terminate", "Terminate a topic: no more messages may be published to it.")
def terminate(rest, path):
    last = rest.request("POST", f"{path}/terminate").json()
    emit(f"Topic successfully terminated at {last['ledgerId']}:{last['entryId']}")


@_topic_command("partitioned-terminate", "Terminate every partition of a partitioned topic.")
def partitioned_terminate(rest, path):
    last_ids = rest.request("POST", f"{path}/terminate/partitions").json()
    domain, tenant, ns, local = path[len("/admin/v2/"):].split("/", 3)
    name = f"{domain}://{tenant}/{ns}/{urllib.parse.unquote(local)}"
    for index, last in sorted(last_ids.items(), key=lambda kv: int(kv[0])):
        emit(f"Topic {name}-partition-{index} successfully terminated at "
             f"{last['ledgerId']}:{last['entryId']}:{last['partitionIndex']}")


@_topic_command("info-internal", "Get the internal metadata of a topic (its ledgers and properties).")
def info_internal(rest, path):
    emit(rest.get(f"{path}/internal-info"))


@_ns_command("clear-backlog", "Clear the backlog of every subscription (or one) of a namespace's topics.")
@click.option("-s", "--sub", help="Only this subscription.")
@click.option("-b", "--bundle", help="Only this bundle: {start-boundary}_{end-boundary}.")
@click.option("-force", "--force", is_flag=True, help="Do not ask for confirmation.")
def clear_namespace_backlog(rest, ns, sub, bundle, force):
    if not force:
        click.confirm(f"Clear the backlog of {'subscription ' + sub if sub else 'every subscription'} in {ns}?",
                      abort=True, err=True)
    where = f"{quote(bundle)}/" if bundle else ""
    rest.post(f"/admin/v2/namespaces/{ns}/{where}clearBacklog", subscription=sub)
