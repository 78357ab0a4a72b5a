"""``magnetar-admin tenants``: list, get, create, update, delete (``/admin/v2/tenants``)."""

from __future__ import annotations

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import TENANT, csv, pass_rest


@click.group("tenants")
def tenants():
    """Operations about tenants."""


@tenants.command("list")
@pass_rest
def list_tenants(rest):
    """List the existing tenants."""
    emit(rest.get("/admin/v2/tenants"))


@tenants.command("get")
@click.argument("tenant", type=TENANT)
@pass_rest
def get(rest, tenant):
    """Get the configuration of a tenant."""
    emit(rest.get(f"/admin/v2/tenants/{tenant}"))


def _info(admin_roles: str | None, allowed_clusters: str | None) -> dict:
    return {"adminRoles": csv(admin_roles), "allowedClusters": csv(allowed_clusters)}


_ROLES = click.option("-r", "--admin-roles", help="Comma-separated admin roles.")
_CLUSTERS = click.option("-c", "--allowed-clusters", help="Comma-separated clusters the tenant may use.")


@tenants.command("create")
@click.argument("tenant", type=TENANT)
@_ROLES
@_CLUSTERS
@pass_rest
def create(rest, tenant, admin_roles, allowed_clusters):
    """Create a new tenant."""
    rest.put(f"/admin/v2/tenants/{tenant}", _info(admin_roles, allowed_clusters))


@tenants.command("update")
@click.argument("tenant", type=TENANT)
@_ROLES
@_CLUSTERS
@pass_rest
def update(rest, tenant, admin_roles, allowed_clusters):
    """Update a tenant's admin roles and allowed clusters (both are replaced)."""
    rest.post(f"/admin/v2/tenants/{tenant}", _info(admin_roles, allowed_clusters))


@tenants.command("delete")
@click.argument("tenant", type=TENANT)
@pass_rest
def delete(rest, tenant):
    """Delete a tenant (it must have no namespaces)."""
    rest.delete(f"/admin/v2/tenants/{tenant}")


GROUPS = (tenants,)
