"""``magnetar-admin brokers``, ``bookies`` and ``broker-stats``: the cluster's processes as the brokers see them."""

from __future__ import annotations

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import CLUSTER, pass_rest


@click.group("brokers")
def brokers():
    """Operations about brokers."""


@brokers.command("list")
@click.argument("cluster", type=CLUSTER, required=False)
@pass_rest
def list_brokers(rest, cluster):
    """List the active brokers of a cluster (the only cluster, when there is one and none is named)."""
    if cluster is None:
        names = rest.get("/admin/v2/clusters")
        if len(names) != 1:
            raise click.UsageError(f"name the cluster: this metadata store has {len(names)} ({', '.join(names)})")
        cluster = names[0]
    emit(rest.get(f"/admin/v2/brokers/{cluster}"))


@brokers.command("leader-broker")
@pass_rest
def leader_broker(rest):
    """Get the information of the leader broker (the load balancer's leader)."""
    emit(rest.get("/admin/v2/brokers/leaderBroker"))


@brokers.command("healthcheck")
@pass_rest
def healthcheck(rest):
    """Run a health check against the broker; prints ok."""
    rest.request("GET", "/admin/v2/brokers/health")
    emit("ok")


@click.group("bookies")
def bookies():
    """Operations about bookies and their rack placement."""


@bookies.command("list-bookies")
@pass_rest
def list_bookies(rest):
    """List the bookies (read-write and read-only)."""
    emit(rest.get("/admin/v2/bookies/all"))


bookies.add_command(list_bookies, "list")  # the name issue 21 uses; pulsar-admin's is list-bookies


@bookies.command("racks-placement")
@pass_rest
def racks_placement(rest):
    """Get the rack placement information of all the bookies in the cluster."""
    emit(rest.get("/admin/v2/bookies/racks-info"))


@click.group("broker-stats")
def broker_stats():
    """Operations to collect broker statistics."""


@broker_stats.command("load-report")
@pass_rest
def load_report(rest):
    """Get the load report of the broker."""
    emit(rest.get("/admin/v2/broker-stats/load-report"))


GROUPS = (brokers, bookies, broker_stats)
