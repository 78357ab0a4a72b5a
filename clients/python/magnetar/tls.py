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


def parse_service_url(url: str) -> tuple[str, bool]:
    """``pulsar://h:p`` or ``pulsar+ssl://h:p`` -> ("h:p", uses TLS). Raises ValueError for anything else."""
    if not isinstance(url, str):
        raise ValueError(f"service URL must be a string, got {type(url).__name__}")
    for scheme, tls in ((PLAIN, False), (TLS, True)):
        if url.startswith(scheme):
            address = url[len(scheme):].rstrip("/")
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                break
            return address, tls
    raise ValueError(f"service URL must look like pulsar://host:port or pulsar+ssl://host:port, got {url!r}")


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
