"""Policies at namespace and topic level: message TTL, backlog quotas, persistence, retention, deduplication,
the producer/consumer limits, inactive-topic deletion, subscription expiry, the publish and dispatch rates, and
(namespace only) the compaction threshold and the schema policies.

pulsar-admin has each as ``set-X`` / ``get-X`` / ``remove-X`` under ``namespaces`` (on
``/admin/v2/namespaces/{t}/{ns}/{policy}``) and under ``topics`` (on ``/admin/v2/persistent/{t}/{ns}/{topic}/
{policy}``, where ``get-X --applied`` answers the value in force: the topic's, else its namespace's, else
the broker's). A policy is a row: its command name, its REST name at that level, and how its flags become the
document, so one function registers the three commands at either level.
"""

from __future__ import annotations

import click

from broker.admin_cli.namespaces import _ns_command
from broker.admin_cli.output import emit
from broker.admin_cli.params import RELATIVE_TIME, SIZE
from broker.admin_cli.topics import _topic_command

QUOTA_TYPES = ("destination_storage", "message_age")
QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
INACTIVE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


def _level(level: str):
    """The command decorator of a level; its function gets (rest, base path of the policy routes, ...)."""
    if level == "topic":
        return _topic_command

    def namespace_command(name, help_text):
        def register(function):
            def with_base(rest, ns, **options):
                return function(rest, f"/admin/v2/namespaces/{ns}", **options)

            with_base.__click_params__ = getattr(function, "__click_params__", [])
            return _ns_command(name, help_text)(with_base)

        return register

    return namespace_command


def _applied(level: str, command):
    if level == "topic":
        command = click.option("-ap", "--applied", is_flag=True,
                               help="The value in force (the topic's, else the namespace's, else the broker's).")(command)
    return command


def policy_commands(level: str, name: str, rest_name: str, options, document, *, get=True, remove=True,
                    get_path: str | None = None, get_name: str | None = None) -> None:
    """Register ``set-NAME`` (``options`` are click decorators; ``document(**values)`` the body), ``get-NAME``
    and ``remove-NAME`` at ``level`` ("namespace" or "topic")."""
    command = _level(level)

    def set_policy(rest, base, **values):
        body, query = document(**values)
        rest.post(f"{base}/{rest_name}", body, **query)

    for option in reversed(options):
        set_policy = option(set_policy)
    command(f"set-{name}", f"Set the {level}'s {rest_name}.")(set_policy)

    if get:
        def get_policy(rest, base, applied=False):
            emit(rest.get(f"{base}/{get_path or rest_name}", applied=applied or None))

        command(f"get-{get_name or name}", f"Get the {level}'s {get_path or rest_name} (null when not set).")(_applied(level, get_policy))
    if remove:
        def remove_policy(rest, base, **query):
            rest.delete(f"{base}/{rest_name}", **query)

        if rest_name == "backlogQuota":
            remove_policy = click.option("-t", "--type", "backlogQuotaType", type=click.Choice(QUOTA_TYPES),
                                         default=QUOTA_TYPES[0], show_default=True)(remove_policy)
        command(f"remove-{name}", f"Remove the {level}'s {rest_name}.")(remove_policy)


def _body(key=None):
    """The document is the one flag's value (``key`` None), or ``{key: value}``."""
    return lambda value: (value if key is None else {key: value}, {})


def _value(flags, **kwargs):
    return click.option(*flags, "value", required=True, **kwargs)


def _retention(size, time_s):
    return {"retentionTimeInMinutes": time_s // 60 if time_s >= 0 else -1,
            "retentionSizeInMB": size // (1024 * 1024) if size >= 0 else -1}, {}


RETENTION_OPTIONS = (
    click.option("-s", "--size", type=SIZE, required=True, help="Size limit: 4096, 10M, 16G, 3T; -1 is infinite."),
    click.option("-t", "--time", "time_s", type=RELATIVE_TIME, required=True,
                 help="Time limit: 120 (seconds), 100m, 3h, 2d, 5w; -1 is infinite."),
)


def _quota(limit, limit_time, policy, quota_type):
    if limit is None and limit_time is None:
        raise click.UsageError("give --limit and/or --limitTime")
    doc = {"limitSize": -1 if limit is None else limit, "limitTime": -1 if limit_time is None else limit_time,
           "policy": policy}
    return doc, {"backlogQuotaType": quota_type}


QUOTA_OPTIONS = (
    click.option("-l", "--limit", type=SIZE, help="Size limit of the backlog: 10M, 16G."),
    click.option("-lt", "--limitTime", "limit_time", type=RELATIVE_TIME, help="Age limit: 100 (seconds), 3h, 2d."),
    click.option("-p", "--policy", type=click.Choice(QUOTA_POLICIES), required=True,
                 help="What happens at the limit."),
    click.option("-t", "--type", "quota_type", type=click.Choice(QUOTA_TYPES), default=QUOTA_TYPES[0],
                 show_default=True, help="destination_storage limits size, message_age limits time."),
)


def _persistence(ensemble, write_quorum, ack_quorum, mark_delete_rate):
    return {"bookkeeperEnsemble": ensemble, "bookkeeperWriteQuorum": write_quorum, "bookkeeperAckQuorum": ack_quorum,
            "managedLedgerMaxMarkDeleteRate": mark_delete_rate}, {}


PERSISTENCE_OPTIONS = (
    click.option("-e", "--bookkeeper-ensemble", "ensemble", type=int, default=2, show_default=True,
                 help="Bookies each ledger is striped over (E)."),
    click.option("-w", "--bookkeeper-write-quorum", "write_quorum", type=int, default=2, show_default=True,
                 help="Copies written of each entry (Qw)."),
    click.option("-a", "--bookkeeper-ack-quorum", "ack_quorum", type=int, default=2, show_default=True,
                 help="Acknowledged copies before an add succeeds (Qa)."),
    click.option("-r", "--ml-mark-delete-max-rate", "mark_delete_rate", type=float, default=0.0, show_default=True,
                 help="Mark-delete operations per second (0: no throttle)."),
)


def _inactive(enable, disable, max_inactive_s, delete_mode):
    if enable == disable:
        raise click.UsageError("give exactly one of --enable-delete-while-inactive / --disable-delete-while-inactive")
    return {"inactiveTopicDeleteMode": delete_mode, "maxInactiveDurationSeconds": max_inactive_s,
            "deleteWhileInactive": enable}, {}


INACTIVE_OPTIONS = (
    click.option("-e", "--enable-delete-while-inactive", "enable", is_flag=True, help="Delete inactive topics."),
    click.option("-d", "--disable-delete-while-inactive", "disable", is_flag=True, help="Keep inactive topics."),
    click.option("-t", "--max-inactive-duration", "max_inactive_s", type=RELATIVE_TIME, required=True,
                 help="Inactive for longer than this: 60 (seconds), 10m, 1h."),
    click.option("-m", "--delete-mode", type=click.Choice(INACTIVE_MODES), default=INACTIVE_MODES[0],
                 show_default=True, help="Which inactive topics are deleted."),
)


def _enable_or_disable(enable, disable):
    if enable == disable:
        raise click.UsageError("give exactly one of --enable / --disable")
    return enable, {}


def _on_off(what: str) -> tuple:
    return (click.option("-e", "--enable", is_flag=True, help=f"Enable {what}."),
            click.option("-d", "--disable", is_flag=True, help=f"Disable {what}."))


DEDUP_OPTIONS = _on_off("deduplication")
# pulsar-admin's choices of set-schema-compatibility-strategy (UNDEFINED: the broker's default applies)
SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
                     "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")


# Rates: (command name, REST policy, flags as (short, long, document field, default)); the same at both levels.
_DISPATCH_FLAGS = (
    ("-md", "--msg-dispatch-rate", "dispatchThrottlingRateInMsg", -1),
    ("-bd", "--byte-dispatch-rate", "dispatchThrottlingRateInByte", -1),
    ("-dt", "--dispatch-rate-period", "ratePeriodInSecond", 1),
)
RATES = (
    ("publish-rate", "publishRate", (("-m", "--msg-publish-rate", "publishThrottlingRateInMsg", -1),
                                     ("-b", "--byte-publish-rate", "publishThrottlingRateInByte", -1))),
    ("dispatch-rate", "dispatchRate", _DISPATCH_FLAGS),
    ("subscription-dispatch-rate", "subscriptionDispatchRate", _DISPATCH_FLAGS),
)


def _rate_options(flags, relative: bool):
    options = [click.option(short, long, field, type=int, default=default, show_default=True, help=field)
               for short, long, field, default in flags]
    if relative:
        options.append(click.option("-rp", "--relative-to-publish-rate", "relativeToPublishRate", is_flag=True,
                                    help="Throttle at publish rate + this rate."))
    return options


def _rate(**fields):
    return dict(fields), {}


def rate_commands(level: str) -> None:
    for name, rest_name, flags in RATES:
        policy_commands(level, name, rest_name, _rate_options(flags, rest_name != "publishRate"), _rate)


# ---- namespace level -----------------------------------------------------------------------------------------

policy_commands("namespace", "message-ttl", "messageTTL",
                [_value(("-ttl", "--messageTTL"), type=RELATIVE_TIME, help="TTL: 60 (seconds), 10m, 3h; 0 is off.")],
                _body())
policy_commands("namespace", "backlog-quota", "backlogQuota", QUOTA_OPTIONS, _quota, get=False)
policy_commands("namespace", "persistence", "persistence", PERSISTENCE_OPTIONS, _persistence)
policy_commands("namespace", "inactive-topic-policies", "inactiveTopicPolicies", INACTIVE_OPTIONS, _inactive)
policy_commands("namespace", "subscription-expiration-time", "subscriptionExpirationTime",
                [_value(("-t", "--time"), type=click.IntRange(0), help="Minutes without consumers.")], _body())


policy_commands("namespace", "compaction-threshold", "compactionThreshold",
                [_value(("-t", "--threshold"), type=SIZE,
                        help="Backlog after the compaction horizon that starts a run: 100M, 1G; 0 is off.")], _body())
policy_commands("namespace", "schema-compatibility-strategy", "schemaCompatibilityStrategy",
                [_value(("-c", "--compatibility"), type=click.Choice(SCHEMA_STRATEGIES, case_sensitive=False),
                        help="How a new schema version must relate to the earlier ones.")],
                lambda value: (value.upper(), {}), remove=False)
policy_commands("namespace", "is-allow-auto-update-schema", "isAllowAutoUpdateSchema",
                _on_off("schema updates by producers"), _enable_or_disable, remove=False)
policy_commands("namespace", "schema-validation-enforce", "schemaValidationEnforced",
                _on_off("refusing producers without a schema on topics with one"), _enable_or_disable, remove=False)
rate_commands("namespace")


@_ns_command("get-backlog-quotas", "Get the namespace's backlog quotas (by type).")
def get_backlog_quotas(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}/backlogQuotaMap"))


# ---- topic level ---------------------------------------------------------------------------------------------


def _topic_ttl(value):
    return None, {"messageTTL": value}  # Pulsar's topic form: ?messageTTL=N


policy_commands("topic", "message-ttl", "messageTTL",
                [_value(("-t", "--ttl"), type=RELATIVE_TIME, help="TTL: 60 (seconds), 10m, 3h; 0 is off.")],
                _topic_ttl)
policy_commands("topic", "retention", "retention", RETENTION_OPTIONS, _retention)
policy_commands("topic", "backlog-quota", "backlogQuota", QUOTA_OPTIONS, _quota, get_path="backlogQuotaMap",
                get_name="backlog-quotas")
policy_commands("topic", "persistence", "persistence", PERSISTENCE_OPTIONS, _persistence)
policy_commands("topic", "deduplication", "deduplicationEnabled", DEDUP_OPTIONS, _enable_or_disable)
policy_commands("topic", "inactive-topic-policies", "inactiveTopicPolicies", INACTIVE_OPTIONS, _inactive)
for _name, _rest_name, _flags in (
        ("max-producers", "maxProducers", ("-p", "--max-producers")),
        ("max-consumers", "maxConsumers", ("-c", "--max-consumers")),
        ("max-consumers-per-subscription", "maxConsumersPerSubscription", ("-c", "--max-consumers-per-subscription")),
        ("max-unacked-messages-per-consumer", "maxUnackedMessagesOnConsumer", ("-m", "--maxNum")),
        ("max-unacked-messages-per-subscription", "maxUnackedMessagesOnSubscription", ("-m", "--maxNum"))):
    policy_commands("topic", _name, _rest_name, [_value(_flags, type=int, help=_rest_name)], _body())
rate_commands("topic")
