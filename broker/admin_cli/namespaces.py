"""``magnetar-admin namespaces``: namespaces, their bundles, permissions and policies (``/admin/v2/namespaces``).

A policy command is one row of a table where it can be: ``_LIMITS`` for the integer limits, ``_RATES`` for
the rate documents. Adding a policy the broker learns is a row or a few lines here.
"""

from __future__ import annotations

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import NAMESPACE, RELATIVE_TIME, SIZE, TENANT, csv, ns_path, pass_rest, quote


@click.group("namespaces")
def namespaces():
    """Operations about namespaces."""


def _ns_command(name: str, help_text: str):
    """A ``namespaces NAME tenant/namespace`` command; the function gets (rest, "tenant/ns", ...)."""

    def register(function):
        @namespaces.command(name, help=help_text)
        @click.argument("namespace", type=NAMESPACE)
        @pass_rest
        def command(rest, namespace, **options):
            return function(rest, ns_path(namespace), **options)

        command.params[:0] = getattr(function, "__click_params__", [])[::-1]
        return command

    return register


@namespaces.command("list")
@click.argument("tenant", type=TENANT)
@pass_rest
def list_namespaces(rest, tenant):
    """Get the namespaces of a tenant."""
    emit(rest.get(f"/admin/v2/namespaces/{tenant}"))


@_ns_command("topics", "Get the list of topics of a namespace.")
def topics(rest, ns):
    emit(rest.get(f"/admin/v2/persistent/{ns}"))


@_ns_command("bundles", "Get the bundles of a namespace (boundaries and count).")
def bundles(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}/bundles"))


@_ns_command("policies", "Get the configuration policies of a namespace.")
def policies(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}"))


@_ns_command("create", "Create a new namespace.")
@click.option("-b", "--bundles", "num_bundles", type=int, default=0, help="Number of bundles to activate.")
@click.option("-c", "--clusters", help="Comma-separated clusters the namespace is assigned to.")
def create(rest, ns, num_bundles, clusters):
    body = {}
    if num_bundles:
        body["bundles"] = {"numBundles": num_bundles}
    if clusters:
        body["replication_clusters"] = csv(clusters)
    rest.put(f"/admin/v2/namespaces/{ns}", body)


@_ns_command("delete", "Delete a namespace (it must have no topics).")
@click.option("-f", "--force", is_flag=True, help="Ask the broker to delete its topics too.")
def delete(rest, ns, force):
    rest.delete(f"/admin/v2/namespaces/{ns}", force=force or None)


# ---- permissions ------------------------------------------------------------------------------------------


@_ns_command("permissions", "Get the permissions on a namespace (role -> actions, as JSON).")
def permissions(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}/permissions"))


@_ns_command("grant-permission", "Grant permissions on a namespace.")
@click.option("--role", required=True, help="Client role to grant permissions to.")
@click.option("--actions", required=True, help="Comma-separated actions: produce,consume (and functions, ...).")
def grant_permission(rest, ns, role, actions):
    rest.post(f"/admin/v2/namespaces/{ns}/permissions/{quote(role)}", csv(actions))


@_ns_command("revoke-permission", "Revoke a role's permissions on a namespace.")
@click.option("--role", required=True, help="Client role to revoke permissions from.")
def revoke_permission(rest, ns, role):
    rest.delete(f"/admin/v2/namespaces/{ns}/permissions/{quote(role)}")


# ---- bundles: unload and split -------------------------------------------------------------------------------


def _bundle_names(rest, ns: str) -> list[str]:
    boundaries = rest.get(f"/admin/v2/namespaces/{ns}/bundles")["boundaries"]
    return [f"{lo}_{hi}" for lo, hi in zip(boundaries, boundaries[1:])]


@_ns_command("unload", "Unload a namespace (every bundle, or the one given) from the brokers serving it.")
@click.option("-b", "--bundle", help="{start-boundary}_{end-boundary}")
def unload(rest, ns, bundle):
    # Each bundle's owner unloads it; a broker that does not own it redirects there (followed by the client).
    for name in [bundle] if bundle else _bundle_names(rest, ns):
        rest.put(f"/admin/v2/namespaces/{ns}/{quote(name)}/unload")


@_ns_command("split-bundle", "Split a namespace bundle at its midpoint.")
@click.option("-b", "--bundle", required=True, help="{start-boundary}_{end-boundary}")
@click.option("-u", "--unload", is_flag=True, help="Unload the newly split bundles.")
@click.option("-san", "--split-algorithm-name", help="range_equally_divide (the one supported).")
def split_bundle(rest, ns, bundle, unload, split_algorithm_name):
    rest.put(f"/admin/v2/namespaces/{ns}/{quote(bundle)}/split", unload=unload or None,
             splitAlgorithmName=split_algorithm_name)


# ---- retention and deduplication --------------------------------------------------------------------------


@_ns_command("set-retention", "Set the retention policy of a namespace.")
@click.option("-s", "--size", type=SIZE, required=True, help="Size limit: 4096, 10M, 16G, 3T; -1 is infinite.")
@click.option("-t", "--time", "time_s", type=RELATIVE_TIME, required=True,
              help="Time limit: 120 (seconds), 100m, 3h, 2d, 5w; -1 is infinite.")
def set_retention(rest, ns, size, time_s):
    rest.post(f"/admin/v2/namespaces/{ns}/retention", {
        "retentionTimeInMinutes": time_s // 60 if time_s >= 0 else -1,
        "retentionSizeInMB": size // (1024 * 1024) if size >= 0 else -1})


@_ns_command("get-retention", "Get the retention policy of a namespace.")
def get_retention(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}/retention"))


@_ns_command("remove-retention", "Remove the retention policy of a namespace (the broker's default applies).")
def remove_retention(rest, ns):
    rest.delete(f"/admin/v2/namespaces/{ns}/retention")


@_ns_command("set-deduplication", "Enable or disable deduplication for a namespace.")
@click.option("-e", "--enable", is_flag=True, help="Enable deduplication.")
@click.option("-d", "--disable", is_flag=True, help="Disable deduplication.")
def set_deduplication(rest, ns, enable, disable):
    if enable == disable:
        raise click.UsageError("give exactly one of --enable / --disable")
    rest.post(f"/admin/v2/namespaces/{ns}/deduplication", enable)


@_ns_command("get-deduplication", "Get the deduplication setting of a namespace (null when not set).")
def get_deduplication(rest, ns):
    emit(rest.get(f"/admin/v2/namespaces/{ns}/deduplication"))


@_ns_command("remove-deduplication", "Remove the namespace's deduplication setting (the broker's default applies).")
def remove_deduplication(rest, ns):
    rest.delete(f"/admin/v2/namespaces/{ns}/deduplication")


# ---- integer limits: (command suffix, REST policy, short flag, long flag) -------------------------------------

_LIMITS = (
    ("max-producers-per-topic", "maxProducersPerTopic", "-p", "--max-producers-per-topic"),
    ("max-consumers-per-topic", "maxConsumersPerTopic", "-c", "--max-consumers-per-topic"),
    ("max-consumers-per-subscription", "maxConsumersPerSubscription", "-c", "--max-consumers-per-subscription"),
    # pulsar-admin's long flag for this one says "topic"; kept so scripts work
    ("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer", "-c", "--max-unacked-messages-per-topic"),
    ("max-unacked-messages-per-subscription", "maxUnackedMessagesPerSubscription", "-c",
     "--max-unacked-messages-per-subscription"),
)


def _limit_commands(suffix: str, policy: str, short: str, long: str) -> None:
    @_ns_command(f"set-{suffix}", f"Set {policy} for a namespace.")
    @click.option(short, long, "value", type=int, required=True, help=policy)
    def set_limit(rest, ns, value):
        rest.post(f"/admin/v2/namespaces/{ns}/{policy}", value)

    @_ns_command(f"get-{suffix}", f"Get {policy} of a namespace (null when not set).")
    def get_limit(rest, ns):
        emit(rest.get(f"/admin/v2/namespaces/{ns}/{policy}"))

    @_ns_command(f"remove-{suffix}", f"Remove {policy} of a namespace (the broker's default applies).")
    def remove_limit(rest, ns):
        rest.delete(f"/admin/v2/namespaces/{ns}/{policy}")


for _row in _LIMITS:
    _limit_commands(*_row)


GROUPS = (namespaces,)
