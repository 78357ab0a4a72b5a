"""Service URLs and the client's TLS settings (the official client's option names), as an ``ssl.SSLContext``.

``pulsar+ssl://host:port`` turns TLS on; lookups then answer with the broker's ``brokerServiceUrlTls``. The
options mean what they mean in pulsar-client: ``tls_trust_certs_file_path`` is the CA the broker's
certificate must chain to (the system's CAs when not given); ``tls_validate_hostname`` checks the
certificate names the host dialled (off by default, as in pulsar-client); ``tls_allow_insecure_connection``
accepts any broker certificate. A client certificate comes from AuthenticationTLS or from
``tls_certificate_file_path`` / ``tls_private_key_file_path``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from magnetar.errors import InvalidConfiguration

PLAIN, TLS = "pulsar://", "pulsar+ssl://"
MAX_SERVICE_HOSTS = 64  # hosts in one service URL: a cluster's brokers, not a list to scan


def parse_service_url(url: str) -> tuple[str, bool]:
    """``pulsar://h:p`` or ``pulsar+ssl://h:p`` -> ("h:p", uses TLS). Raises ValueError for anything else."""
    addresses, tls = parse_service_hosts(url, many=False)
    return addresses[0], tls


def parse_service_hosts(url: str, many: bool = True) -> tuple[tuple[str, ...], bool]:
    """``pulsar://h1:p1,h2:p2`` (Pulsar's form: one scheme, then hosts separated by commas) -> (("h1:p1", "h2:p2"),
    uses TLS). Every host needs its port. Raises ValueError for anything else, or for more than
    MAX_SERVICE_HOSTS hosts."""
    if not isinstance(url, str):
        raise ValueError(f"service URL must be a string, got {type(url).__name__}")
    shape = "pulsar://host:port[,host:port...] or pulsar+ssl://host:port[,...]" if many else \
        "pulsar://host:port or pulsar+ssl://host:port"
    for scheme, tls in ((PLAIN, False), (TLS, True)):
        if url.startswith(scheme):
            addresses = tuple(url[len(scheme):].rstrip("/").split(","))
            if len(addresses) > 1 and not many:
                break
            if len(addresses) > MAX_SERVICE_HOSTS:
                raise ValueError(f"service URL names {len(addresses)} hosts; at most {MAX_SERVICE_HOSTS} are allowed")
            for address in addresses:
                host, _, port = address.rpartition(":")
                bad_host = not host or any(c.isspace() or c == "/" for c in host)
                if bad_host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise ValueError(f"service URL must look like {shape}: bad host {address!r} in {url!r}")
            return addresses, tls
    raise ValueError(f"service URL must look like {shape}, got {url!r}")


@dataclass(frozen=True)
class TlsOptions:
    trust_certs_file_path: str | None = None
    validate_hostname: bool = False
    allow_insecure_connection: bool = False
    certificate_file_path: str | None = None
    private_key_file_path: str | None = None

    def __post_init__(self) -> None:
        for name in ("trust_certs_file_path", "certificate_file_path", "private_key_file_path"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"Argument tls_{name} is expected to be of type 'str'")
        for name in ("validate_hostname", "allow_insecure_connection"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Argument tls_{name} is expected to be of type 'bool'")
        if (self.certificate_file_path is None) != (self.private_key_file_path is None):
            raise ValueError("tls_certificate_file_path and tls_private_key_file_path go together")


def client_context(options: TlsOptions, client_certificate: tuple[str, str] | None = None) -> ssl.SSLContext:
    """The context for pulsar+ssl:// connections. ``client_certificate`` (AuthenticationTLS) wins over the
    options' certificate. Raises InvalidConfiguration naming a file that cannot be loaded."""
    try:
        ctx = ssl.create_default_context(cafile=options.trust_certs_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfiguration(f"cannot load tls_trust_certs_file_path {options.trust_certs_file_path}: "
                                   f"{exc}") from exc
    if options.allow_insecure_connection:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = options.validate_hostname
    cert = client_certificate
    if cert is None and options.certificate_file_path is not None:
        cert = (options.certificate_file_path, options.private_key_file_path)
    if cert is not None:
        try:
            ctx.load_cert_chain(*cert)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfiguration(f"cannot load the client certificate {cert[0]} with key {cert[1]}: "
                                       f"{exc}") from exc
    return ctx
