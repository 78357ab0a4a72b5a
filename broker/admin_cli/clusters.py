"""``magnetar-admin clusters``: list, get, create, update, delete (``/admin/v2/clusters``)."""

from __future__ import annotations

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import CLUSTER, pass_rest


@click.group("clusters")
def clusters():
    """Operations about clusters."""


@clusters.command("list")
@pass_rest
def list_clusters(rest):
    """List the existing clusters."""
    emit(rest.get("/admin/v2/clusters"))


@clusters.command("get")
@click.argument("cluster", type=CLUSTER)
@pass_rest
def get(rest, cluster):
    """Get the configuration data of a cluster."""
    emit(rest.get(f"/admin/v2/clusters/{cluster}"))


def _data_options(command):
    for flag, help_text in (("--url", "service URL (http://)"), ("--url-secure", "service URL (https://)"),
                            ("--broker-url", "broker service URL (pulsar://)"),
                            ("--broker-url-secure", "broker service URL (pulsar+ssl://)")):
        command = click.option(flag, help=help_text)(command)
    return command


def _data(url, url_secure, broker_url, broker_url_secure) -> dict:
    doc = {"serviceUrl": url, "serviceUrlTls": url_secure, "brokerServiceUrl": broker_url,
           "brokerServiceUrlTls": broker_url_secure}
    return {k: v for k, v in doc.items() if v}


@clusters.command("create")
@click.argument("cluster", type=CLUSTER)
@_data_options
@pass_rest
def create(rest, cluster, **urls):
    """Provision a new cluster."""
    rest.put(f"/admin/v2/clusters/{cluster}", _data(**urls))


@clusters.command("update")
@click.argument("cluster", type=CLUSTER)
@_data_options
@pass_rest
def update(rest, cluster, **urls):
    """Update the configuration of a cluster."""
    rest.post(f"/admin/v2/clusters/{cluster}", _data(**urls))


@clusters.command("delete")
@click.argument("cluster", type=CLUSTER)
@pass_rest
def delete(rest, cluster):
    """Delete an existing cluster."""
    rest.delete(f"/admin/v2/clusters/{cluster}")


GROUPS = (clusters,)
