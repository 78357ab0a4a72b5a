"""The `magnetar-admin` console script: global flags, the command groups, exit codes.

Built on click rather than argparse: pulsar-admin is a deep tree of groups (``topics reset-cursor``) with
many small commands, each with its own flags, which click declares next to the function that runs it; and
click brings shell completion of the whole tree (``_MAGNETAR_ADMIN_COMPLETE=bash_source magnetar-admin``),
which argparse does not have without another package. click also accepts pulsar-admin's multi-letter short
flags (``-md``, ``-ttl``) as they are.

Exit codes: 0 on success; 1 when the broker refuses or fails the request (its reason on stderr) or when it
cannot be reached; 2 for a usage error (an unknown command or flag, a value that does not parse), as click
reports them.
"""

from __future__ import annotations

import os
import sys

import click

from broker.admin_cli import brokers, clusters, namespaces, schemas, tenants, topics
from broker.admin_cli import lifecycle, policies  # noqa: F401  (their commands join namespaces and topics)
from broker.admin_cli.rest import AdminClient
from broker.admin_cli.settings import AdminCliError, read_client_conf, resolve

EXIT_FAILED = 1
CONF_ENV = "PULSAR_CLIENT_CONF"


class Session:
    """What every command shares: the settings from flags and client.conf, and the REST client built from
    them on first use (so ``--help`` and usage errors never need a broker or a readable credential)."""

    def __init__(self, flags: dict, conf_path: str | None):
        self._flags, self._conf_path = flags, conf_path
        self._client: AdminClient | None = None

    @property
    def rest(self) -> AdminClient:
        if self._client is None:
            conf = read_client_conf(self._conf_path) if self._conf_path else {}
            self._client = AdminClient(resolve(conf, **self._flags))
        return self._client


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110, "terminal_width": 110})
@click.option("--admin-url", help="Admin service URL (client.conf webServiceUrl; default http://localhost:8080).")
@click.option("--auth-plugin", help="Authentication plugin class name, e.g. "
              "org.apache.pulsar.client.impl.auth.AuthenticationToken (client.conf authPlugin).")
@click.option("--auth-params", help='Authentication parameters, e.g. "token:xxx", "file:///path/token", '
              '\'{"userId":"u","password":"p"}\' (client.conf authParams).')
@click.option("--tls-trust-cert-path", help="CA certificate file the broker's certificate must chain to.")
@click.option("--tls-allow-insecure", is_flag=True, default=None, help="Accept any broker certificate.")
@click.option("--tls-enable-hostname-verification", is_flag=True, default=None,
              help="Check that the broker's certificate names the host in the URL.")
@click.option("--request-timeout", "request_timeout_s", type=click.IntRange(1, 3600), default=None,
              help="Seconds to wait for each request (default 60).")
@click.option("--client-conf", type=click.Path(dir_okay=False), default=None,
              help=f"A Pulsar client.conf to read (default: the file ${CONF_ENV} names, if set).")
@click.version_option(package_name="magnetar", prog_name="magnetar-admin")
@click.pass_context
def cli(ctx, client_conf, **flags):
    """Administer a Magnetar cluster with pulsar-admin's commands and flags."""
    if ctx.obj is None:  # a test may hand in a session of its own
        ctx.obj = Session(flags, client_conf or os.environ.get(CONF_ENV) or None)


for _module in (tenants, clusters, brokers, namespaces, topics, schemas):
    for _group in _module.GROUPS:
        cli.add_command(_group)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="magnetar-admin", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILED
    except AdminCliError as exc:
        click.echo(str(exc), err=True)
        return EXIT_FAILED
    return 0


def entry_point() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `magnetar-admin topics list NS | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_FAILED
    sys.exit(code)
