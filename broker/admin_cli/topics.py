"""``magnetar-admin topics``: topics, partitioned topics, subscriptions and permissions (``/admin/v2/persistent``).

Each command is its route in a few lines: ``_topic_command`` supplies the topic argument (any short form the
clients accept: ``my-topic`` is ``persistent://public/default/my-topic``) and turns it into the route's path.
"""

from __future__ import annotations

import urllib.parse

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import (MESSAGE_ID, NAMESPACE, RELATIVE_TIME, TOPIC, csv, ns_path, parse_message_id,
                                     pass_rest, quote, timestamp_before, topic_path)
from broker.admin_cli.settings import AdminCliError
from magnetar.topic_name import PARTITION_SUFFIX


@click.group("topics")
def topics():
    """Operations about topics."""


def _topic_command(name: str, help_text: str):
    """A ``topics NAME <topic>`` command; the function gets (rest, "/admin/v2/<domain>/<t>/<ns>/<topic>", ...)."""

    def register(function):
        @topics.command(name, help=help_text)
        @click.argument("topic", type=TOPIC)
        @pass_rest
        def command(rest, topic, **options):
            return function(rest, f"/admin/v2/{topic_path(topic)}", **options)

        command.params[:0] = getattr(function, "__click_params__", [])[::-1]
        return command

    return register


_SUBSCRIPTION = click.option("-s", "--subscription", required=True, help="Subscription name.")


@topics.command("list")
@click.argument("namespace", type=NAMESPACE)
@click.option("-td", "--topic-domain", type=click.Choice(["persistent", "non_persistent"]),
              help="Only this domain's topics (both when not given).")
@pass_rest
def list_topics(rest, namespace, topic_domain):
    """Get the list of topics of a namespace (partitions of partitioned topics included), persistent then
    non-persistent, as pulsar-admin lists them."""
    domains = [topic_domain.replace("_", "-")] if topic_domain else ["persistent", "non-persistent"]
    emit([name for domain in domains for name in rest.get(f"/admin/v2/{domain}/{ns_path(namespace)}")])


@topics.command("list-partitioned-topics")
@click.argument("namespace", type=NAMESPACE)
@pass_rest
def list_partitioned(rest, namespace):
    """Get the list of partitioned topics of a namespace."""
    emit(rest.get(f"/admin/v2/persistent/{ns_path(namespace)}/partitioned"))


@_topic_command("create", "Create a non-partitioned topic.")
def create(rest, path):
    rest.put(path)


@_topic_command("create-partitioned-topic", "Create a partitioned topic.")
@click.option("-p", "--partitions", type=int, required=True, help="Number of partitions.")
def create_partitioned(rest, path, partitions):
    rest.put(f"{path}/partitions", partitions)


@_topic_command("update-partitioned-topic", "Grow a partitioned topic to more partitions.")
@click.option("-p", "--partitions", type=int, required=True, help="New number of partitions.")
def update_partitioned(rest, path, partitions):
    rest.post(f"{path}/partitions", partitions)


@_topic_command("get-partitioned-topic-metadata", "Get the partitioned topic metadata ({\"partitions\": N}).")
def partitioned_metadata(rest, path):
    emit(rest.get(f"{path}/partitions"))


def _broker_url(rest, path: str) -> str:
    """The service URL of the broker serving the topic at admin ``path``, by the HTTP lookup (the TLS one when
    the admin URL is https and the broker has one, as pulsar-admin picks)."""
    found = rest.get(path.replace("/admin/v2/", "/lookup/v2/topic/", 1))
    tls = rest.settings.admin_url.startswith("https://") and found.get("brokerUrlTls")
    return tls or found["brokerUrl"]


@_topic_command("lookup", "Look up a topic: the service URL of the broker serving it.")
def lookup(rest, path):
    emit(_broker_url(rest, path))


@_topic_command("partitioned-lookup", "Look up each partition of a partitioned topic: {partition: service URL}.")
def partitioned_lookup(rest, path):
    topic = urllib.parse.unquote(path.removeprefix("/admin/v2/").replace("/", "://", 1))
    count = rest.get(f"{path}/partitions")["partitions"]
    if count == 0:
        raise AdminCliError(f"{topic} is not a partitioned topic")
    emit({f"{topic}-partition-{i}": _broker_url(rest, f"{path}{PARTITION_SUFFIX}{i}") for i in range(count)})


@_topic_command("delete", "Delete a topic.")
@click.option("-f", "--force", is_flag=True, help="Close its producers and consumers first.")
def delete(rest, path, force):
    rest.delete(path, force=force or None)


@_topic_command("delete-partitioned-topic", "Delete a partitioned topic and its partitions.")
@click.option("-f", "--force", is_flag=True, help="Close its producers and consumers first.")
def delete_partitioned(rest, path, force):
    rest.delete(f"{path}/partitions", force=force or None)


@_topic_command("unload", "Unload a topic (it is loaded again by the next lookup).")
def unload(rest, path):
    rest.put(f"{path}/unload")


# ---- stats ---------------------------------------------------------------------------------------------------


@_topic_command("stats", "Get the stats of a topic.")
def stats(rest, path):
    emit(rest.get(f"{path}/stats"))


@_topic_command("stats-internal", "Get the internal stats of a topic (its managed ledger and cursors).")
def stats_internal(rest, path):
    emit(rest.get(f"{path}/internalStats"))


@_topic_command("partitioned-stats", "Get the stats of a partitioned topic.")
@click.option("--per-partition", is_flag=True, help="Include each partition's stats.")
def partitioned_stats(rest, path, per_partition):
    emit(rest.get(f"{path}/partitioned-stats", perPartition=per_partition))


@_topic_command("partitioned-stats-internal", "Get the internal stats of each partition of a partitioned topic.")
def partitioned_stats_internal(rest, path):
    emit(rest.get(f"{path}/partitioned-internalStats"))


@_topic_command("last-message-id", "Get the id of the last message of a topic.")
def last_message_id(rest, path):
    emit(rest.get(f"{path}/lastMessageId"))


# ---- subscriptions -------------------------------------------------------------------------------------------


@_topic_command("subscriptions", "Get the subscriptions of a topic.")
def subscriptions(rest, path):
    emit(rest.get(f"{path}/subscriptions"))


def _start_id(text: str) -> dict | None:
    """pulsar-admin's --messageId: latest (the default), earliest, or ledgerId:entryId."""
    if text == "latest":
        return None
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    try:
        return parse_message_id(text)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; or latest / earliest", param_hint="'-m' / '--messageId'") from None


@_topic_command("create-subscription", "Create a durable subscription on a topic.")
@_SUBSCRIPTION
@click.option("-m", "--messageId", "message_id", default="latest", show_default=True,
              help="Where it starts: latest, earliest or ledgerId:entryId.")
def create_subscription(rest, path, subscription, message_id):
    rest.put(f"{path}/subscription/{quote(subscription)}", _start_id(message_id))


@_topic_command("unsubscribe", "Delete a durable subscription from a topic.")
@_SUBSCRIPTION
@click.option("-f", "--force", is_flag=True, help="Disconnect its consumers first.")
def unsubscribe(rest, path, subscription, force):
    rest.delete(f"{path}/subscription/{quote(subscription)}", force=force or None)


@_topic_command("reset-cursor", "Reset a subscription's position to a time or a message id.")
@_SUBSCRIPTION
@click.option("-t", "--time", "time_s", type=RELATIVE_TIME, help="How far back: 100s, 10m, 3h, 2d, 5w.")
@click.option("-m", "--messageId", "message_id", type=MESSAGE_ID, help="ledgerId:entryId to reset to.")
def reset_cursor(rest, path, subscription, time_s, message_id):
    if (time_s is None) == (message_id is None):
        raise click.UsageError("give exactly one of --time / --messageId")
    base = f"{path}/subscription/{quote(subscription)}/resetcursor"
    if message_id is not None:
        rest.post(base, message_id)
    else:
        rest.post(f"{base}/{timestamp_before(time_s)}")


# ---- permissions ---------------------------------------------------------------------------------------------


@_topic_command("permissions", "Get the permissions on a topic (its namespace's grants included).")
def permissions(rest, path):
    emit(rest.get(f"{path}/permissions"))


@_topic_command("grant-permission", "Grant permissions on a topic.")
@click.option("--role", required=True, help="Client role to grant permissions to.")
@click.option("--actions", required=True, help="Comma-separated actions: produce,consume.")
def grant_permission(rest, path, role, actions):
    rest.post(f"{path}/permissions/{quote(role)}", csv(actions))


@_topic_command("revoke-permission", "Revoke a role's permissions on a topic.")
@click.option("--role", required=True, help="Client role to revoke permissions from.")
def revoke_permission(rest, path, role):
    rest.delete(f"{path}/permissions/{quote(role)}")


GROUPS = (topics,)
